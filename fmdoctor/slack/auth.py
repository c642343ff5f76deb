"""Who may do what from Slack: which clusters a channel may look at, and who may approve a fix.

Deny by default: a channel with no entry (and no '*' entry) may check nothing, and nobody approves a fix
unless their user id, or a user group they belong to, is in ``slack.approvers``. Group members come from
``usergroups.users.list`` and are cached for ``slack.approver_cache``; a lookup that fails refuses.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fmdoctor.config import SlackSettings
from fmdoctor.engine.errors import FmdoctorError

log = logging.getLogger(__name__)


class NotAllowed(FmdoctorError):
    """A Slack user or channel asked for something the configuration does not allow."""


def allowed_clusters(settings: SlackSettings, channel: str | None) -> list[str]:
    return settings.clusters_for(channel)


def pick_cluster(settings: SlackSettings, channel: str | None, cluster: str | None) -> str:
    """The cluster a command in ``channel`` may run on: the one named, or the channel's only one."""
    allowed = allowed_clusters(settings, channel)
    if not allowed:
        raise NotAllowed("this channel may not check any cluster",
                         hint="add it to slack.channel_clusters in fmdoctor.yaml")
    if cluster is None:
        named = [c for c in allowed if c != "*"]
        if len(named) == 1 and "*" not in allowed:
            return named[0]
        raise NotAllowed("name the cluster", hint=f"clusters this channel may check: {', '.join(allowed)}")
    if cluster in allowed or "*" in allowed:
        return cluster
    listed = ", ".join(allowed) or "none"
    raise NotAllowed(f"this channel may not check cluster {cluster!r}",
                     hint=f"clusters allowed here: {listed} (slack.channel_clusters)")


class Approvers:
    """The approver allow-list: user ids directly, user-group ids through their current members."""

    def __init__(self, settings: SlackSettings, client: Any, clock: Callable[[], float] = time.monotonic):
        self.users = {a for a in settings.approvers if a[0] in "UW"}
        self.groups = [a for a in settings.approvers if a[0] == "S"]
        self.client = client
        self.ttl = settings.approver_cache.total_seconds()
        self.clock = clock
        self._members: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def allows(self, user_id: str | None) -> bool:
        if not user_id:
            return False
        if user_id in self.users:
            return True
        return any(user_id in self._group(group) for group in self.groups)

    def _group(self, group: str) -> frozenset[str]:
        now = self.clock()
        with self._lock:
            cached = self._members.get(group)
            if cached and now - cached[0] < self.ttl:
                return cached[1]
        try:
            response = self.client.usergroups_users_list(usergroup=group)
            members = frozenset(response.get("users") or [])
        except Exception as exc:  # SlackApiError, network: refuse rather than guess
            log.warning("cannot list the members of user group %s: %s", group, type(exc).__name__)
            return frozenset()
        with self._lock:
            self._members[group] = (now, members)
        return members
