"""Fault injection for tests and benchmarks: make chosen AWS calls fail the way AWS fails them.

The injector answers at botocore's ``before-send`` hook (per HTTP attempt, ahead of moto) with an
error response in the service's own wire protocol, so the real client path runs: error parsing,
the standard retry mode for throttling, and the engine's error handling. Nothing is monkeypatched.
Attach it to every session the engine opens by passing ``injector.aws_factory`` to
:class:`~fmdoctor.engine.api.Doctor`.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse

from fmdoctor.engine.api import new_aws
from fmdoctor.engine.aws import Aws, AwsOptions


@dataclass
class Fault:
    service: str
    operation: str
    code: str
    message: str
    status: int
    times: int | None = None  # None: every attempt
    when: Callable[[dict[str, Any]], bool] | None = None  # only calls whose API parameters match


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

    def deny(self, service: str, operation: str, code: str = "AccessDenied",
             when: Callable[[dict[str, Any]], bool] | None = None) -> FaultInjector:
        message = f"User: arn:aws:iam::123456789012:user/ci is not authorized to perform: {service}:{operation}"
        return self._add(Fault(service, operation, code, message, 403, when=when))

    def throttle(self, service: str, operation: str, times: int | None = None,
                 code: str = "Throttling") -> FaultInjector:
        return self._add(Fault(service, operation, code, "Rate exceeded", 400, times))

    def fail(self, service: str, operation: str, code: str, message: str = "injected", status: int = 400,
             times: int | None = None, when: Callable[[dict[str, Any]], bool] | None = None) -> FaultInjector:
        return self._add(Fault(service, operation, code, message, status, times, when))

    def _add(self, fault: Fault) -> FaultInjector:
        with self._lock:
            self._faults.append(fault)
        return self

    def attach(self, aws: Aws) -> Aws:
        aws.session.events.register("before-parameter-build", self._before_parameter_build)
        aws.session.events.register("before-call", self._before_call)
        aws.session.events.register_first("before-send", self._before_send)
        return aws

    def aws_factory(self, options: AwsOptions, credentials: Any = None) -> Aws:
        return self.attach(new_aws(options, credentials))

    def _before_parameter_build(self, params: dict[str, Any], **_: Any) -> None:
        self._current.params = dict(params)  # the API parameters, as the caller passed them

    def _before_call(self, model: Any, **_: Any) -> None:
        # before-send knows only the HTTP request; remember which operation this thread is sending.
        service = model.service_model
        # The wire protocol the client chose (CloudWatch lists cbor, json and query and botocore picks json).
        protocol = getattr(service, "resolved_protocol", None) or service.protocol
        self._current.value = (service.service_name, model.name, protocol, getattr(self._current, "params", {}))

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        current = getattr(self._current, "value", None)
        if current is None:
            return None
        service, operation, protocol, params = current
        with self._lock:
            fault = next((f for f in self._faults if (f.service, f.operation) == (service, operation)
                          and (f.times is None or f.times > 0) and (f.when is None or f.when(params))), None)
            if fault is None:
                return None
            if fault.times is not None:
                fault.times -= 1
            self.injected[f"{service}.{operation}"] += 1
        body, headers = error_body(protocol, fault.code, fault.message)
        return AWSResponse(request.url, fault.status, headers, _Raw(body))
