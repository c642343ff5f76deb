"""The Prometheus HTTP API as a metric source: self-hosted Prometheus, Grafana Mimir/Thanos, and Amazon Managed
Service for Prometheus (AMP).

Only reads: ``GET /api/v1/query_range`` (PromQL over a window, one call per metric for the whole cluster),
``GET /api/v1/label/__name__/values`` (which metric names exist, so absent ones cost no query) and, when a
self-hosted Prometheus holds no exporter series at all, ``GET /api/v1/status/runtimeinfo`` (when it started).
Requests go through the one outbound client (:mod:`fmdoctor.engine.outbound`): a bearer token never follows a
redirect to another origin and a SigV4-signed request never follows one. Auth is none, a bearer token read from
an environment variable (never from the config file), or AWS SigV4 with service
``aps`` for AMP (IAM ``aps:QueryMetrics``, ``aps:GetLabels``; the workspace URL is
``https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/``, per the AMP user guide's "Query using
Prometheus-compatible APIs"). Each call is counted: AMP's as AWS API calls (``aps.QueryMetrics``...), a plain
Prometheus's as ``prometheus.*`` queries.
"""

from __future__ import annotations

import json
import re
import urllib.error
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from fmdoctor.engine import outbound
from fmdoctor.engine.errors import AwsCallFailed, AwsFailure

NONE, BEARER, SIGV4 = "none", "bearer", "sigv4"
AMP_SERVICE = "aps"
_AMP_HOST = re.compile(r"^aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com")
# The operations as AMP's IAM names them, and as a plain Prometheus's queries are counted.
# One query_range answer for a whole cluster: 16,384 GPU series (2,048 p5 nodes) of 120 points at about 40 bytes
# of JSON a point is about 80 MB; a larger answer is refused rather than held (Prometheus' own per-query limit,
# query.max-samples, is 50 million samples: about 2 GB of JSON).
RESPONSE_MAX_BYTES = 256 * 1024 * 1024
OPERATIONS = {"query_range": "QueryMetrics", "label_values": "GetLabels", "series": "GetSeries"}

Counter = Callable[[str, str], None]  # (service, operation)


class PrometheusFailed(AwsCallFailed):
    """A Prometheus API call that failed; for AMP the failure names the IAM action, like any AWS call's."""


@dataclass(frozen=True)
class Endpoint:
    """Where and how to query: ``url`` is the API's base (ending in '/'), ``region`` AMP's signing region."""

    url: str
    auth: str = NONE
    token: str | None = None
    credentials: Any = None  # botocore Credentials, for SigV4
    region: str | None = None

    @property
    def amp(self) -> bool:
        return self.auth == SIGV4

    def describe(self) -> str:
        return f"{'Amazon Managed Service for Prometheus' if self.amp else 'Prometheus'} at {self.url}"


def base_url(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def amp_region(url: str) -> str | None:
    """The region an AMP workspace URL names (aps-workspaces.<region>.amazonaws.com)."""
    match = _AMP_HOST.match(urlsplit(url).hostname or "")
    return match.group(1) if match else None


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: tuple[tuple[datetime, float], ...]


class PrometheusClient:
    def __init__(self, endpoint: Endpoint, count: Counter, timeout: float = 30.0):
        self.endpoint = endpoint
        self.count = count
        self.timeout = timeout

    def label_values(self, label: str, match: Sequence[str], start: datetime, end: datetime) -> list[str]:
        params = [("start", _ts(start)), ("end", _ts(end)), *(("match[]", m) for m in match)]
        data = self._get("label_values", f"api/v1/label/{quote(label, safe='')}/values", params)
        return [str(v) for v in data or []]

    def started(self) -> datetime | None:
        """When a self-hosted Prometheus started (``/api/v1/status/runtimeinfo``'s startTime); None for AMP, whose
        query API has no status endpoints, and for a server that does not say (Mimir, Thanos, an old Prometheus)."""
        if self.endpoint.amp:
            return None
        try:
            data = self._get("runtimeinfo", "api/v1/status/runtimeinfo", []) or {}
            return datetime.fromisoformat(str(data["startTime"]).replace("Z", "+00:00"))
        except (PrometheusFailed, KeyError, TypeError, ValueError):
            return None

    def query_range(self, query: str, start: datetime, end: datetime, step: timedelta) -> list[Series]:
        params = [("query", query), ("start", _ts(start)), ("end", _ts(end)), ("step", f"{int(step.total_seconds())}s")]
        data = self._get("query_range", "api/v1/query_range", params) or {}
        found = []
        for raw in data.get("result", []):
            points = tuple((datetime.fromtimestamp(float(t), tz=start.tzinfo), float(v))
                           for t, v in raw.get("values", []) if v not in {"NaN", "+Inf", "-Inf"})
            found.append(Series({k: str(v) for k, v in raw.get("metric", {}).items()}, points))
        return found

    def _get(self, operation: str, path: str, params: Sequence[tuple[str, str]]) -> Any:
        url = self.endpoint.url + path + "?" + urlencode(list(params), quote_via=quote, safe="-_.~")
        headers = {"Accept": "application/json"}
        if self.endpoint.auth == BEARER and self.endpoint.token:
            headers["Authorization"] = f"Bearer {self.endpoint.token}"
        elif self.endpoint.amp:
            headers.update(self._signed(url))
        if self.endpoint.amp:
            self.count(AMP_SERVICE, OPERATIONS[operation])
        else:
            self.count("prometheus", operation)
        try:
            request = outbound.request(url, headers=headers, signed=self.endpoint.amp)
            with outbound.urlopen(request, timeout=self.timeout) as reply:
                body = json.loads(outbound.read_body(reply, RESPONSE_MAX_BYTES, self.endpoint.describe())
                                  .decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise self._failure(operation, exc.code, _error_text(exc)) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise PrometheusFailed(AwsFailure("ConnectionError", f"{self.endpoint.describe()}: {exc}", None,
                                              "timeout"), f"metrics from {self.endpoint.describe()}") from None
        except outbound.ResponseTooLarge as exc:
            raise self._failure(operation, 0, str(exc)) from None
        except ValueError as exc:
            raise self._failure(operation, 0, f"not a Prometheus API answer ({exc})") from None
        if body.get("status") != "success":
            raise self._failure(operation, 0, f"{body.get('errorType', 'error')}: {body.get('error', '')}")
        return body.get("data")

    def _signed(self, url: str) -> dict[str, str]:
        request = AWSRequest(method="GET", url=url, headers={"Accept": "application/json"})
        SigV4Auth(self.endpoint.credentials, AMP_SERVICE, self.endpoint.region or "us-east-1").add_auth(request)
        return {k: v for k, v in request.headers.items() if k.lower() != "accept"}

    def _failure(self, operation: str, status: int, text: str) -> PrometheusFailed:
        action = f"{AMP_SERVICE}:{OPERATIONS[operation]}" if self.endpoint.amp else None
        if status in {401, 403}:
            code, kind = ("AccessDenied", "access-denied") if self.endpoint.amp else ("Unauthorized", "access-denied")
        elif status == 429:
            code, kind = "Throttling", "throttled"
        elif status == 404:
            code, kind = "NotFound", "not-found"
        else:
            code, kind = (f"HTTP{status}" if status else "PrometheusError"), "error"
        message = f"{self.endpoint.describe()} answered {status or 'an error'}: {text[:300]}"
        return PrometheusFailed(AwsFailure(code, message, action, kind), f"metrics from {self.endpoint.describe()}")


def _ts(when: datetime) -> str:
    return f"{when.timestamp():.3f}"


def _error_text(exc: urllib.error.HTTPError) -> str:
    if isinstance(exc, outbound.RedirectRefused):
        return str(exc.msg)
    body = outbound.read_error_body(exc)
    try:
        parsed = json.loads(body)
        return f"{parsed.get('errorType', '')}: {parsed.get('error', '')}".strip(": ") or body
    except ValueError:
        return body
