"""Fault injection for the tests (only they use it): make chosen AWS calls fail the way AWS fails them.

The injector answers at botocore's ``before-send`` hook (per HTTP attempt, ahead of moto) with an
error response in the service's own wire protocol, so the real client path runs: error parsing,
the standard retry mode for throttling, and the engine's error handling. Nothing is monkeypatched.
Attach it to every session the engine opens by passing ``injector.aws_factory`` to
:class:`~fmdoctor.engine.api.Doctor`.

Besides error responses it can break the transport (:meth:`FaultInjector.drop`: a read timeout or a
connection reset, raised where botocore's HTTP layer raises them, so the standard retry mode sees them)
and truncate a listing (:meth:`FaultInjector.truncate`: the first page claims a next page, and the token
it hands out is refused, as an expired or corrupted pagination token is).

A fault can target only EC2 ``DryRun=True`` requests (``dry_run=True``) or only real ones
(``dry_run=False``): denying both is how AWS answers a caller without the permission; failing only the
real call models a pre-flight that passed and an apply that did not (throttled, resource gone).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

from fmdoctor.engine.api import new_aws
from fmdoctor.engine.aws import Aws, AwsOptions
from fmdoctor.engine.errors import iam_action_for


@dataclass
class Fault:
    service: str
    operation: str
    code: str
    message: str
    status: int
    times: int | None = None  # None: every attempt
    dry_run: bool | None = None  # None: DryRun and real requests alike; True/False: only those
    when: Callable[[dict[str, Any]], bool] | None = None  # only calls whose API parameters match
    transport: str | None = None  # "timeout" or "reset": the HTTP attempt raises instead of answering

    def matches(self, service: str, operation: str, dry_run: bool, params: dict[str, Any]) -> bool:
        return ((self.service, self.operation) == (service, operation) and (self.times is None or self.times > 0)
                and (self.dry_run is None or self.dry_run == dry_run) and (self.when is None or self.when(params)))


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: Any):  # type: ignore[no-untyped-def]
        yield self._body


def _cbor_text(text: str) -> bytes:
    data = text.encode()
    if len(data) < 24:
        return bytes([0x60 + len(data)]) + data
    if len(data) < 256:
        return bytes([0x78, len(data)]) + data
    return bytes([0x79]) + len(data).to_bytes(2, "big") + data


def error_body(protocol: str, code: str, message: str) -> tuple[bytes, dict[str, str]]:
    """An error response body and headers as AWS sends them in ``protocol``."""
    if protocol == "ec2":
        body = (f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
                "<RequestID>fmdoctor-fault</RequestID></Response>")
        return body.encode(), {"Content-Type": "text/xml"}
    if protocol == "query":
        body = (f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message>"
                "</Error><RequestId>fmdoctor-fault</RequestId></ErrorResponse>")
        return body.encode(), {"Content-Type": "text/xml"}
    if protocol == "rest-xml":
        body = f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>fmdoctor-fault</RequestId></Error>"
        return body.encode(), {"Content-Type": "application/xml"}
    if protocol == "smithy-rpc-v2-cbor":
        body = bytes([0xA2]) + _cbor_text("__type") + _cbor_text(code) + _cbor_text("message") + _cbor_text(message)
        return body, {"Content-Type": "application/cbor", "smithy-protocol": "rpc-v2-cbor"}
    # json and rest-json
    body = json.dumps({"__type": code, "message": message}).encode()
    return body, {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": code}


class FaultInjector:
    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._current = threading.local()
        self.injected: Counter[str] = Counter()
        self._truncated: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}

    def deny(self, service: str, operation: str, code: str = "AccessDenied",
             dry_run: bool | None = None, when: Callable[[dict[str, Any]], bool] | None = None) -> FaultInjector:
        """Deny an action. EC2 says ``UnauthorizedOperation`` (pass it as ``code``), to DryRun requests too."""
        action = iam_action_for(service, operation)  # as AWS words it: tag:GetResources, not the boto3 name
        message = f"User: arn:aws:iam::123456789012:user/ci is not authorized to perform: {action}"
        return self._add(Fault(service, operation, code, message, 403, dry_run=dry_run, when=when))

    def throttle(self, service: str, operation: str, times: int | None = None,
                 code: str = "Throttling") -> FaultInjector:
        return self._add(Fault(service, operation, code, "Rate exceeded", 400, times))

    def fail(self, service: str, operation: str, code: str, message: str = "injected", status: int = 400,
             times: int | None = None, dry_run: bool | None = None,
             when: Callable[[dict[str, Any]], bool] | None = None) -> FaultInjector:
        return self._add(Fault(service, operation, code, message, status, times, dry_run, when))

    def drop(self, service: str, operation: str, kind: str = "timeout", times: int | None = None) -> FaultInjector:
        """Break the transport of a call: ``timeout`` (no answer within the read timeout) or ``reset`` (the
        connection closed under the request)."""
        if kind not in TRANSPORT_ERRORS:
            raise ValueError(f"kind must be one of {sorted(TRANSPORT_ERRORS)}")
        return self._add(Fault(service, operation, kind, "", 0, times, transport=kind))

    def truncate(self, service: str, operation: str, code: str = "InvalidNextToken",
                 output_token: str = "NextToken", input_token: str = "NextToken",
                 more: dict[str, Any] | None = None) -> FaultInjector:
        """The first page of a listing says there is more (``output_token``, plus ``more`` such as S3's
        ``IsTruncated``); the request for the next page fails with ``code``."""
        with self._lock:
            self._truncated[(service, operation)] = (output_token, dict(more or {}))
        return self.fail(service, operation, code, "The pagination token is invalid or has expired",
                         when=lambda params: params.get(input_token) == TRUNCATED_TOKEN)

    def _add(self, fault: Fault) -> FaultInjector:
        with self._lock:
            self._faults.append(fault)
        return self

    def attach(self, aws: Aws) -> Aws:
        aws.session.events.register("before-parameter-build", self._before_parameter_build)
        aws.session.events.register("before-call", self._before_call)
        aws.session.events.register_first("before-send", self._before_send)
        aws.session.events.register("after-call", self._after_call)
        return aws

    def aws_factory(self, options: AwsOptions, credentials: Any = None) -> Aws:
        return self.attach(new_aws(options, credentials))

    def _before_parameter_build(self, params: dict[str, Any], **_: Any) -> None:
        self._current.params = dict(params)  # the API parameters, as the caller passed them

    def _before_call(self, model: Any, params: Any = None, **_: Any) -> None:
        # before-send knows only the HTTP request; remember which operation this thread is sending.
        body = params.get("body") if isinstance(params, dict) else None
        dry_run = isinstance(body, dict) and str(body.get("DryRun", "")).lower() == "true"  # EC2's query protocol
        # The protocol the client speaks: botocore picks one of the service's ``protocols`` (CloudWatch
        # lists smithy-rpc-v2-cbor first but clients speak json), so the metadata's first entry can be wrong.
        service = model.service_model
        protocol = getattr(service, "resolved_protocol", None) or service.protocol
        self._current.value = (service.service_name, model.name, protocol, dry_run,
                               getattr(self._current, "params", {}))

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        # botocore calls every before-send handler; moto's in-process mock comes after this one and would
        # still execute the request (a mutation would happen behind the injected error). An answered
        # request is pointed at an unroutable URL so nothing else acts on it; a retry restores the URL.
        original = getattr(request, "_fmdoctor_url", None)
        if original is not None:
            request.url = original
            request._fmdoctor_url = None
        current = getattr(self._current, "value", None)
        if current is None:
            return None
        service, operation, protocol, dry_run, api_params = current
        with self._lock:
            fault = next((f for f in self._faults if f.matches(service, operation, dry_run, api_params)), None)
            if fault is None:
                return None
            if fault.times is not None:
                fault.times -= 1
            self.injected[f"{service}.{operation}" + (":DryRun" if dry_run else "")] += 1
        if fault.transport:
            raise TRANSPORT_ERRORS[fault.transport](endpoint_url=request.url)  # moto never sees the request
        body, headers = error_body(protocol, fault.code, fault.message)
        response = AWSResponse(request.url, fault.status, headers, _Raw(body))
        request._fmdoctor_url = request.url
        request.url = _ANSWERED_URL
        return response


    def _after_call(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        key = (model.service_model.service_name, model.name)
        truncated = self._truncated.get(key)
        params = getattr(self._current, "params", {})
        if truncated and isinstance(parsed, dict) and "Error" not in parsed and TRUNCATED_TOKEN not in params.values():
            output_token, more = truncated
            parsed[output_token] = TRUNCATED_TOKEN  # the client returns this very dict
            parsed.update(more)
            with self._lock:
                self.injected[f"{key[0]}.{key[1]}:truncated"] += 1


TRUNCATED_TOKEN = "fmdoctor-truncated-page"
TRANSPORT_ERRORS: dict[str, Any] = {"timeout": ReadTimeoutError, "reset": ConnectionClosedError}
_ANSWERED_URL = "https://fault-injected.fmdoctor.invalid/"
