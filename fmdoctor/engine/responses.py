"""A 200 answer is trusted only when it is whole: truncated or unreadable bodies are errors, never empty data.

botocore reads a JSON body it cannot decode as ``{"message": body}`` and an empty rest-xml body as an empty
element, so a response cut off in transit parses to a result with no items, and every check reading it
would report "nothing there" as healthy. :func:`check_response` runs at botocore's ``before-parse`` hook,
before that happens, and raises :class:`CorruptResponse` (a botocore error, so every existing error path
turns it into an error entry for the checks that needed the call) when the body:

- is shorter or longer than its ``Content-Length``;
- is empty while the operation's output has members carried in the body;
- is JSON (``json``/``rest-json`` protocols) that does not decode to an object;
- is XML (``query``/``ec2``/``rest-xml``) whose root element is never closed: how a truncated document ends.
  XML broken in the middle is left to botocore's parser, whose error :func:`fmdoctor.engine.errors.
  describe_aws_failure` reports without the raw body.
"""

from __future__ import annotations

import json
import re
from typing import Any

from botocore.exceptions import BotoCoreError

# The response_dict key under which check_response leaves the JSON it decoded, as (body, object): a reader that
# takes the page from there (fmdoctor.metrics.cloudwatch) decodes it once instead of twice.
DECODED = "fmdoctor.decoded"

_XML_ROOT = re.compile(rb"\A\s*(?:<\?xml[^>]*\?>\s*)?(?:<!--.*?-->\s*)*<([A-Za-z_][\w.:-]*)", re.S)


class CorruptResponse(BotoCoreError):  # type: ignore[misc]  # botocore is untyped
    """AWS (or something between) answered 200 with a body that is not a whole response."""

    fmt = "the {operation} response was not whole ({problem}); nothing was read from it"


def _body_members(operation_model: Any) -> bool:
    shape = operation_model.output_shape
    if shape is None:
        return False
    return any(m.serialization.get("location") in (None, "") for m in shape.members.values())


def check_response(operation_model: Any, response_dict: dict[str, Any], **_: Any) -> None:
    status = response_dict.get("status_code") or 0
    if not 200 <= status < 300 or operation_model.has_streaming_output:
        return  # errors are parsed as errors; streams are read by the caller
    body: bytes = response_dict.get("body") or b""
    headers = response_dict.get("headers") or {}
    name = f"{operation_model.service_model.service_name}.{operation_model.name}"
    declared = str(headers.get("content-length") or headers.get("Content-Length") or "")
    if declared.isdigit() and int(declared) != len(body) and not headers.get("content-encoding"):
        raise CorruptResponse(operation=name, problem=f"{len(body)} bytes of the {declared} its Content-Length says")
    protocol = operation_model.service_model.resolved_protocol
    if not body.strip():
        if _body_members(operation_model) and protocol in ("json", "query", "ec2", "rest-xml"):
            raise CorruptResponse(operation=name, problem="an empty body where the answer should be")
        return
    if protocol in ("json", "rest-json"):
        try:
            decoded = json.loads(body)
        except json.JSONDecodeError as exc:
            raise CorruptResponse(operation=name, problem=f"JSON that does not decode: {exc.msg} at {exc.pos}") \
                from None
        except ValueError as exc:  # bytes that are not UTF-8/16/32 (json.loads decodes them first)
            raise CorruptResponse(operation=name, problem=f"JSON that does not decode: {exc}") from None
        if not isinstance(decoded, dict):
            raise CorruptResponse(operation=name, problem="JSON that is not an object")
        response_dict[DECODED] = (body, decoded)
    elif protocol in ("query", "ec2", "rest-xml"):
        root = _XML_ROOT.match(body)
        if root is None:
            raise CorruptResponse(operation=name, problem="a body that is not an XML document")
        closing = b"</" + root.group(1) + b">"
        self_closed = re.fullmatch(rb"[^<]*/>\s*", body[root.end():]) is not None
        if not (body.rstrip().endswith(closing) or self_closed):
            raise CorruptResponse(operation=name, problem=f"XML whose {root.group(1).decode()} element is never closed")
