"""``--timeout DURATION``: the one overall deadline of a command that talks to AWS, and what it says meanwhile.

Against an endpoint that accepts connections but never answers, botocore waits its read timeout on every
attempt (30 s x 5 attempts: two and a half minutes of a blank terminal, then "Read timeout"). Here, in one
place:

* every AWS session the command's :class:`~fmdoctor.engine.api.Doctor` opens gets per-call timeouts no longer
  than the deadline, and a note of which calls are in flight (service, operation, where, since when);
* the work runs in a thread the command waits for until the deadline, saying on stderr which call it is
  waiting for when one has taken more than :data:`WAITING_NOTE_S`;
* at the deadline the run is cancelled (no further AWS call starts) and :class:`DeadlineExceeded` names the
  service that did not answer, where, and what to try; the command exits 3 (unknown). Calls still hanging
  are abandoned: the process does not wait for them on its way out (:func:`abandoned`). Ctrl-C and SIGTERM
  while it waits cancel and abandon the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TextIO, TypeVar
from urllib.parse import urlsplit

from fmdoctor.durations import format_duration, parse_duration
from fmdoctor.engine.errors import FmdoctorError

if TYPE_CHECKING:
    from fmdoctor.engine.api import Doctor
    from fmdoctor.engine.aws import Aws, AwsOptions

T = TypeVar("T")
DEFAULT_TIMEOUT = "5m"
WAITING_NOTE_S = 5.0  # a call slower than this is named on stderr while the command waits
_ABANDONED = threading.Event()


class DeadlineExceeded(FmdoctorError):
    """The command did not finish within its --timeout."""


def add_timeout_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", metavar="DURATION", type=_seconds, default=_seconds(DEFAULT_TIMEOUT),
                        help=f"stop and say which service did not answer after this long, e.g. 90s, 10m "
                        f"(default {DEFAULT_TIMEOUT})")


def _seconds(text: str) -> float:
    try:
        seconds = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the timeout must be longer than 0s")
    return seconds


def abandoned() -> bool:
    """Whether a deadline left work behind: the process exits without waiting for its threads."""
    return _ABANDONED.is_set()


@dataclasses.dataclass
class _Call:
    service: str
    operation: str
    where: str
    since: float
    variable: str = "AWS_ENDPOINT_URL_<SERVICE>"  # botocore's per-service endpoint variable


class InFlight:
    """The AWS calls under way in the sessions a doctor opens, and the per-call timeouts capped at the deadline."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self._calls: dict[int, _Call] = {}
        self._lock = threading.Lock()

    def install(self, doctor: Doctor) -> None:
        factory = doctor.aws_factory

        def bounded(options: AwsOptions) -> Aws:
            options = dataclasses.replace(options, read_timeout=min(options.read_timeout, self.limit_s),
                                          connect_timeout=min(options.connect_timeout, self.limit_s))
            aws = factory(options)
            aws.session.events.register("before-call", lambda model, context, params=None, **_:
                                        self._start(model, context, _origin(params)))
            aws.session.events.register("after-call", lambda context, **_: self._end(context))
            aws.session.events.register("after-call-error", lambda context, **_: self._end(context))
            return aws

        doctor.aws_factory = bounded

    def _start(self, model: Any, context: dict[str, Any], where: str) -> None:
        with self._lock:
            service_id = str(model.service_model.service_id).upper().replace(" ", "_").replace("-", "_")
            self._calls[id(context)] = _Call(model.service_model.service_name, model.name,
                                             where or "its AWS endpoint", time.monotonic(),
                                             f"AWS_ENDPOINT_URL_{service_id}")

    def _end(self, context: dict[str, Any]) -> None:
        with self._lock:
            self._calls.pop(id(context), None)

    def oldest(self) -> _Call | None:
        with self._lock:
            return min(self._calls.values(), key=lambda c: c.since, default=None)


def _origin(params: Any) -> str:
    """Where the call goes, as botocore resolved it (--endpoint-url, AWS_ENDPOINT_URL_<SERVICE>, AWS_ENDPOINT_URL
    or AWS's own endpoint, in botocore's order): the request's scheme and host, without path or query."""
    url = params.get("url", "") if isinstance(params, dict) else ""
    parts = urlsplit(str(url))
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def within(doctor: Doctor, seconds: float, work: Callable[[threading.Event], T], stream: TextIO | None = None) -> T:
    """``work(cancel)`` finished within ``seconds``, else :class:`DeadlineExceeded` (see the module). ``stream``
    gets a line naming the call waited for, every :data:`WAITING_NOTE_S` while one is slow."""
    calls = InFlight(seconds)
    calls.install(doctor)
    cancel = threading.Event()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work(cancel)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="fmdoctor-work", daemon=True)
    started = time.monotonic()
    try:
        _wait(thread, started, seconds, calls, stream)
    except BaseException:  # the deadline, Ctrl-C or SIGTERM: no further call starts, none is waited for on exit
        cancel.set()
        _ABANDONED.set()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]  # type: ignore[no-any-return]


def _wait(thread: threading.Thread, started: float, seconds: float, calls: InFlight, stream: TextIO | None) -> None:
    thread.start()
    while True:
        left = seconds - (time.monotonic() - started)
        thread.join(max(0.0, min(WAITING_NOTE_S, left)))
        if not thread.is_alive():
            break
        if time.monotonic() - started >= seconds:
            raise _exceeded(calls.oldest(), seconds)
        slow = calls.oldest()
        if stream is not None and slow is not None and time.monotonic() - slow.since >= WAITING_NOTE_S:
            waited = format_duration_s(time.monotonic() - slow.since)
            stream.write(f"fmdoctor: waiting for {slow.service} ({slow.operation} at {slow.where}): no answer for "
                         f"{waited} (gives up at --timeout {format_duration_s(seconds)})\n")
            stream.flush()


def format_duration_s(seconds: float) -> str:
    return format_duration(timedelta(seconds=seconds))


def _exceeded(call: _Call | None, seconds: float) -> DeadlineExceeded:
    limit = format_duration_s(seconds)
    if call is None:
        return DeadlineExceeded(f"the run did not finish within {limit} (--timeout)",
                                hint="raise --timeout, or run fewer checks with --only")
    waited = format_duration_s(time.monotonic() - call.since)
    return DeadlineExceeded(
        f"{call.service} did not answer: {call.operation} at {call.where} was still waiting after {waited}, and the "
        f"run stopped at its --timeout of {limit}",
        hint=f"check that the endpoint is up and answers (--endpoint-url, {call.variable}, AWS_ENDPOINT_URL, a proxy "
        f"or VPC endpoint in between) and that {call.service} is reachable from here; raise --timeout if it is only "
        "slow")
