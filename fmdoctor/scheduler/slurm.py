"""Slurm as a source: node states and reasons, GRES, partitions and running jobs; and node drain/resume.

Two ways in, one parser:

- ``local``: ``sinfo --json`` and ``squeue --json`` on a login/head node. Slurm 21.08 added ``--json`` to
  sinfo and squeue (their man pages, https://slurm.schedmd.com/sinfo.html#OPT_json); ``scontrol show node
  --json`` only came with 23.02, so nodes are read from ``sinfo --json``, which carries the same node record
  (state, flags, reason, gres, address) in 22.05. Changes go through ``scontrol update NodeName=...`` as an argv
  list, never a shell string.
- ``slurmrestd``: ``GET /slurm/v0.0.NN/nodes`` and ``/jobs`` with ``X-SLURM-USER-TOKEN`` (a JWT from
  ``scontrol token``; https://slurm.schedmd.com/rest.html, https://slurm.schedmd.com/jwt.html). Node updates
  (``POST /slurm/v0.0.39+/node/{name}``) exist from Slurm 23.02; against 22.05's v0.0.38 a change is refused
  with that reason instead of being attempted another way.

Shapes differ by version: 22.05 (data parser v0.0.38) gives ``state`` as one lower-case word plus
``state_flags``; 23.02+ gives ``state`` as a list of upper-case words; 23.11+ wraps numbers as
``{"set": true, "number": N}``. All three are read.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fmdoctor.engine import outbound
from fmdoctor.scheduler.hostlist import expand
from fmdoctor.scheduler.model import SLURM, SchedulerJob, SchedulerNode, SchedulerUnavailable, SchedulerView

COMMAND_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 20.0
# slurmrestd's node and job listings are a few KB a node (its OpenAPI description a few MB): 128 MiB is far above
# the largest cluster's answer and keeps a misbehaving server from filling memory.
RESPONSE_MAX_BYTES = 128 * 1024 * 1024
REST_VERSIONS = ("v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")  # newest first; the first the server knows is used
UPDATE_FROM = "v0.0.39"  # slurmrestd's node update endpoint (Slurm 23.02)
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED"})
# Slurm node names: letters, digits, '-', '_', '.'; reasons: one line, bounded (slurm.conf's NodeName, Reason)
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_REASON = 256
_GRANT_LOCAL = ("run fmdoctor on a Slurm login or head node with sinfo/squeue on PATH and SLURM_CONF pointing at "
                "the cluster's slurm.conf, or set scheduler.slurm.via: slurmrestd with url and token_env")
_GRANT_REST = ("give fmdoctor a JWT (scontrol token username=USER lifespan=SECONDS) in the environment variable "
               "named by scheduler.slurm.token_env, and a slurmrestd URL it can reach")

Runner = Callable[[Sequence[str]], str]


def _number(value: Any) -> int | None:
    """An integer field in any version's shape: N, or {"set": true, "number": N} (23.11+)."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _words(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.upper()] if value else []
    if isinstance(value, list):
        return [str(v).upper() for v in value if v]
    return []


def parse_gres(text: str) -> dict[str, int]:
    """``gpu:8``, ``gpu:a100:8(S:0-1)``, ``gpu:h100:4,shard:8`` -> ``{'gpu': 8, ...}`` (counts per name)."""
    out: dict[str, int] = {}
    # the socket/index lists in parentheses hold commas of their own (S:0,2): drop them before splitting
    for item in re.sub(r"\([^)]*\)", "", text or "").split(","):
        item = item.strip()
        if not item or item in ("(null)", "N/A"):
            continue
        parts = item.split(":")
        count = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
        out[parts[0]] = out.get(parts[0], 0) + count
    return out


# Power-save flags Slurm ranks above NOT_RESPONDING (slurm_protocol_defs.c, node_state_string: IDLE# / IDLE~ /
# IDLE% / IDLE! before IDLE*): a cloud node powered down, being suspended or booting is silent by design, and
# slurmctld flags one it asked to power up NOT_RESPONDING until its slurmd registers (seen in 22.05's
# sinfo --json: ['CLOUD', 'NOT_RESPONDING', 'POWERING_UP']). One that never comes up slurmctld sets DOWN
# ("ResumeTimeout reached"), which is read as DOWN.
POWER_SAVE = frozenset({"POWERING_UP", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})


def parse_node(raw: Mapping[str, Any]) -> SchedulerNode:
    states = _words(raw.get("state")) + _words(raw.get("state_flags"))
    if isinstance(raw.get("state"), str) and raw.get("state", "").endswith("*"):
        states.append("NOT_RESPONDING")
    if POWER_SAVE.intersection(states):
        states = [s for s in states if s.rstrip("*") != "NOT_RESPONDING"]
    addresses = tuple(dict.fromkeys(a for a in (raw.get("address"), raw.get("hostname")) if isinstance(a, str) and a))
    return SchedulerNode(
        name=str(raw.get("name", "")), states=frozenset(s.rstrip("*") for s in states),
        reason=str(raw.get("reason") or ""), reason_by=str(raw.get("reason_set_by_user") or ""),
        reason_since=_number(raw.get("reason_changed_at")) or None, addresses=addresses,
        partitions=tuple(str(p) for p in raw.get("partitions") or ()),
        configured=parse_gres(str(raw.get("gres") or "")),
    )


def parse_nodes(document: Mapping[str, Any]) -> list[SchedulerNode]:
    """The nodes of ``sinfo --json`` or slurmrestd's ``/nodes``; a node listed twice (once per partition in some
    versions) is kept once."""
    seen: dict[str, SchedulerNode] = {}
    for raw in document.get("nodes") or ():
        if isinstance(raw, Mapping) and raw.get("name"):
            node = parse_node(raw)
            seen.setdefault(node.name, node)
    return list(seen.values())


def parse_jobs(document: Mapping[str, Any], now: float) -> list[SchedulerJob]:
    """The running jobs of ``squeue --json`` or slurmrestd's ``/jobs``, with their expanded node lists."""
    jobs = []
    for raw in document.get("jobs") or ():
        if not isinstance(raw, Mapping):
            continue
        states = _words(raw.get("job_state"))
        if not RUNNING_STATES.intersection(states):
            continue
        try:
            nodes = tuple(expand(str(raw.get("nodes") or "")))
        except ValueError:
            nodes = ()
        start = _number(raw.get("start_time"))
        jobs.append(SchedulerJob(
            id=str(_number(raw.get("job_id")) or raw.get("job_id")), name=str(raw.get("name") or ""),
            user=str(raw.get("user_name") or raw.get("user_id") or ""), nodes=nodes, state=",".join(states),
            elapsed_s=max(0, int(now - start)) if start else None))
    return jobs


def document_errors(document: Any, what: str) -> str | None:
    """Why a ``--json`` answer carries no data: Slurm 22.05's sinfo/squeue exit 0 even when slurmctld cannot
    be reached, with ``errors`` ([{"error": "Unspecified error", "errno": -1}]) and an empty list."""
    if not isinstance(document, Mapping):
        return f"not a JSON object: {str(document)[:200]}"
    errors = [e for e in document.get("errors") or () if isinstance(e, Mapping)]
    if errors and not document.get(what):
        first = errors[0]
        text = first.get("description") or first.get("error") or str(first)
        return f"{text} (errno {first.get('errno', first.get('error_number', '?'))}, {first.get('error', '')})"
    return None


def _version(document: Mapping[str, Any]) -> str:
    meta = document.get("meta") or {}
    slurm = meta.get("Slurm") or meta.get("slurm") or {}
    return str(slurm.get("release") or "")


# ---- local commands ----------------------------------------------------------------------------------------

def run_command(argv: Sequence[str]) -> str:
    """Run one Slurm command (argv, no shell); its stdout, or an error carrying its stderr."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SchedulerUnavailable(f"{argv[0]} exited {done.returncode}: {done.stderr.strip()[-400:]}",
                                   _GRANT_LOCAL, "SlurmCommandFailed")
    return done.stdout


def local_available() -> bool:
    """sinfo/squeue on PATH and a slurm.conf they will read ($SLURM_CONF or the packaged default): a machine
    with the client installed but no cluster configured is no Slurm node."""
    if shutil.which("sinfo") is None or shutil.which("squeue") is None:
        return False
    return bool(os.environ.get("SLURM_CONF")) or os.path.exists("/etc/slurm/slurm.conf")


def read_local(runner: Runner = run_command, now: Callable[[], float] = time.time) -> SchedulerView:
    if runner is run_command and not local_available():
        raise SchedulerUnavailable("sinfo/squeue are not on PATH", _GRANT_LOCAL, "SlurmNotFound")
    try:
        nodes_doc = json.loads(runner(["sinfo", "--json"]))
    except (json.JSONDecodeError, subprocess.TimeoutExpired, OSError) as exc:
        raise SchedulerUnavailable(f"sinfo --json: {exc}", _GRANT_LOCAL, "SlurmCommandFailed") from None
    problem = document_errors(nodes_doc, "nodes")
    if problem:
        raise SchedulerUnavailable(f"sinfo --json answered no nodes: {problem}", _GRANT_LOCAL, "SlurmCommandFailed")
    gaps = []
    jobs: list[SchedulerJob] = []
    try:
        jobs_doc = json.loads(runner(["squeue", "--json"]))
        problem = document_errors(jobs_doc, "jobs")
        if problem:
            raise SchedulerUnavailable(problem, _GRANT_LOCAL, "SlurmCommandFailed")
        jobs = parse_jobs(jobs_doc, now())
    except (SchedulerUnavailable, json.JSONDecodeError, subprocess.TimeoutExpired, OSError) as exc:
        gaps.append(f"running jobs: squeue --json failed: {exc}")
    return SchedulerView(SLURM, "sinfo/squeue", tuple(parse_nodes(nodes_doc)), tuple(jobs),
                         version=_version(nodes_doc), gaps=tuple(gaps))


def update_argv(node: str, state: str, reason: str | None) -> list[str]:
    """``scontrol update`` for one node, every value its own argv item (never a shell string)."""
    check_update(node, state, reason)
    argv = ["scontrol", "update", f"NodeName={node}", f"State={state}"]
    if reason:
        argv.append(f"Reason={reason}")
    return argv


def check_update(node: str, state: str, reason: str | None) -> None:
    if not NODE_NAME.match(node):
        raise ValueError(f"{node!r} is not a Slurm node name")
    if state not in ("DRAIN", "RESUME"):
        raise ValueError(f"state {state!r}: fmdoctor only drains and resumes nodes")
    if state == "DRAIN" and not reason:
        raise ValueError("Slurm requires a reason to drain a node")
    if reason is not None and (len(reason) > MAX_REASON or any(c in reason for c in "\r\n\0")):
        raise ValueError(f"the reason must be one line of at most {MAX_REASON} characters")


# ---- slurmrestd --------------------------------------------------------------------------------------------

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The JWT goes to the configured origin only: a redirect is an error, never followed."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} refused (the token stays with "
                                     "the configured slurmrestd)", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirect)


class RestSlurm:
    """slurmrestd at ``url`` with the JWT in ``token``; ``user`` is X-SLURM-USER-NAME when set."""

    def __init__(self, url: str, token: str, user: str | None = None):
        self.url = url.rstrip("/")
        self._token = token
        self.user = user
        self._api: str | None = None

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, Any]:
        headers = {"X-SLURM-USER-TOKEN": self._token, "Accept": "application/json"}
        if self.user:
            headers["X-SLURM-USER-NAME"] = self.user
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with _OPENER.open(request, timeout=HTTP_TIMEOUT_S) as response:
                text = outbound.read_body(response, RESPONSE_MAX_BYTES, f"slurmrestd {self.url}").decode(
                    "utf-8", "replace")
                status = response.status
        except urllib.error.HTTPError as exc:
            text, status = outbound.read_error_body(exc), exc.code
        except (urllib.error.URLError, OSError) as exc:
            raise SchedulerUnavailable(f"slurmrestd {self.url}: {exc}", _GRANT_REST, "SlurmrestdUnreachable") from None
        except outbound.ResponseTooLarge as exc:
            raise SchedulerUnavailable(str(exc), _GRANT_REST, "ResponseTooLarge") from None
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text

    def api(self) -> str:
        """The newest data-parser version this slurmrestd serves (from its OpenAPI description)."""
        if self._api is None:
            status, spec = self._request("GET", "/openapi/v3")
            if status in (401, 403):
                raise SchedulerUnavailable(f"slurmrestd refused the token ({status})", _GRANT_REST, "AccessDenied")
            paths = spec.get("paths", {}) if isinstance(spec, Mapping) else {}
            known = [v for v in REST_VERSIONS if f"/slurm/{v}/nodes" in paths or f"/slurm/{v}/nodes/" in paths]
            self._api = known[0] if known else REST_VERSIONS[-1]
        return self._api

    def _get(self, what: str) -> Mapping[str, Any]:
        status, doc = self._request("GET", f"/slurm/{self.api()}/{what}")
        if status in (401, 403):
            raise SchedulerUnavailable(f"slurmrestd refused the token for /{what} ({status})", _GRANT_REST,
                                       "AccessDenied")
        if status != 200 or not isinstance(doc, Mapping):
            raise SchedulerUnavailable(f"slurmrestd /{what}: HTTP {status}: {str(doc)[:300]}", _GRANT_REST,
                                       "SlurmrestdFailed")
        problem = document_errors(doc, what)
        if problem:
            raise SchedulerUnavailable(f"slurmrestd /{what}: {problem}", _GRANT_REST, "SlurmrestdFailed")
        return doc

    def read(self, now: Callable[[], float] = time.time) -> SchedulerView:
        nodes_doc = self._get("nodes")
        gaps = []
        jobs: list[SchedulerJob] = []
        try:
            jobs = parse_jobs(self._get("jobs"), now())
        except SchedulerUnavailable as exc:
            gaps.append(f"running jobs: {exc.message}")
        return SchedulerView(SLURM, f"slurmrestd {self.url}", tuple(parse_nodes(nodes_doc)), tuple(jobs),
                             version=_version(nodes_doc), gaps=tuple(gaps))

    def update(self, node: str, state: str, reason: str | None) -> None:
        check_update(node, state, reason)
        api = self.api()
        if REST_VERSIONS.index(api) > REST_VERSIONS.index(UPDATE_FROM):
            raise SchedulerUnavailable(
                f"slurmrestd {api} (Slurm before 23.02) cannot update nodes", "use scheduler.slurm.via: local on a "
                "head node (scontrol update), or upgrade to Slurm 23.02+", "SlurmrestdNoNodeUpdate")
        body: dict[str, Any] = {"state": [state]}
        if reason:
            body["reason"] = reason
        status, doc = self._request("POST", f"/slurm/{api}/node/{urllib.parse.quote(node, safe='')}", body)
        if status != 200:
            raise SchedulerUnavailable(f"slurmrestd node update: HTTP {status}: {str(doc)[:300]}", _GRANT_REST,
                                       "AccessDenied" if status in (401, 403) else "SlurmrestdFailed")


def token_from_env(name: str | None, environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    value = environ.get(name or "", "")
    if not name or not value:
        raise SchedulerUnavailable(f"no Slurm JWT in ${name or '(token_env unset)'}", _GRANT_REST, "NoToken")
    return value.removeprefix("SLURM_JWT=").strip()
