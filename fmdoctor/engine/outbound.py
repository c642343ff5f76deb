"""The one outbound HTTP client: every request fmdoctor makes to a URL from its configuration (the ``serve``
webhook, a Prometheus or AMP API, the instance metadata service) goes through :func:`urlopen`.

urllib's default redirect handling copies every header, ``Authorization`` included, to whatever host the
``Location`` names, and turns a redirected POST into a body-less GET whose 200 looks like success. Here:

- a redirect is followed only for a GET or HEAD, at most ``MAX_REDIRECTS`` times;
- a request carrying credentials (``Authorization``, ``Cookie``, ``X-Amz-*`` or an API key header) is never
  redirected to another origin (scheme, host and port): the redirect is refused, the credentials stay home;
- a SigV4-signed request (``signed=True``) is never redirected at all (its signature covers the host);
- any other method (a POST) is never redirected: the redirect is an error, so a delivery that was answered
  with one is a failed delivery, never a success.

A refused redirect raises :class:`RedirectRefused`, an :class:`urllib.error.HTTPError` carrying the 3xx status,
so callers report it as the HTTP failure it is. Every answer is read through :func:`read_body`, which stops at a
size the caller names: a server (or whatever answers at its address) cannot make fmdoctor hold gigabytes.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from http.client import HTTPMessage
from typing import IO, Any
from urllib.parse import urlsplit

MAX_REDIRECTS = 5
_CREDENTIAL_HEADERS = ("authorization", "cookie", "proxy-authorization", "x-api-key", "api-key",
                       "x-aws-ec2-metadata-token")


ERROR_BODY_MAX = 64 * 1024  # an error's text is shown cut to a few hundred characters


class ResponseTooLarge(ValueError):
    """An answer longer than its reader allows (a ValueError: callers already treat an unreadable answer as one)."""


def read_body(response: IO[bytes], limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of ``response``; :class:`ResponseTooLarge` when it holds more."""
    body = response.read(limit + 1)
    if len(body) > limit:
        raise ResponseTooLarge(f"{what} answered more than {limit:,} bytes; the answer is not read")
    return body


def read_error_body(error: urllib.error.HTTPError) -> str:
    """The start of an error answer's text, for a message (never the whole of an unbounded body)."""
    if error.fp is None:
        return str(error.reason)
    try:
        return error.read(ERROR_BODY_MAX).decode("utf-8", "replace")
    except OSError:
        return str(error)


class RedirectRefused(urllib.error.HTTPError):
    """A redirect this client does not follow (the request failed; nothing was sent to ``Location``)."""


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def carries_credentials(request: urllib.request.Request) -> bool:
    names = {k.lower() for k in (*request.headers, *request.unredirected_hdrs)}
    return any(n in _CREDENTIAL_HEADERS or n.startswith("x-amz-") for n in names)


class _SafeRedirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: HTTPMessage, newurl: str) -> urllib.request.Request | None:
        why = refusal(req, newurl)
        if why is not None:
            target = "{}://{}".format(*origin(newurl)[:2])
            raise RedirectRefused(req.full_url, code, f"HTTP {code} redirect to {target} not followed: {why}",
                                  headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def refusal(request: urllib.request.Request, new_url: str) -> str | None:
    """Why a redirect of ``request`` to ``new_url`` is not followed, or None when it may be."""
    method = request.get_method().upper()
    if origin(new_url)[0] not in ("http", "https"):
        return "only http(s) URLs are followed"
    if getattr(request, "fmdoctor_signed", False):
        return "a SigV4-signed request is never redirected"
    if method not in ("GET", "HEAD"):
        return f"a redirected {method} is not a delivery"
    if origin(new_url) != origin(request.full_url) and carries_credentials(request):
        return "credentials are never sent to another origin"
    return None


def request(url: str, data: bytes | None = None, headers: dict[str, str] | None = None, method: str | None = None,
            signed: bool = False) -> urllib.request.Request:
    """A request for :func:`urlopen`; ``signed`` marks a SigV4-signed one (never redirected)."""
    built = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    built.fmdoctor_signed = signed  # type: ignore[attr-defined]
    return built


def urlopen(req: urllib.request.Request, timeout: float) -> Any:
    """Open ``req`` with the redirect rules above (a context manager, as urllib's ``urlopen``)."""
    if urlsplit(req.full_url).scheme.lower() not in ("http", "https"):
        raise urllib.error.URLError(f"only http(s) URLs are fetched, not {req.full_url[:60]!r}")
    opener = urllib.request.build_opener(_SafeRedirects)  # per call: proxies are read from the environment now
    return opener.open(req, timeout=timeout)
