"""What a shared data loader could not verify, kept as data so every check that uses the data reports it.

A loader behind ``ctx.shared`` (checkpoint listings, Spot notices) reads several sources; one denied or
broken source must not sink the others, and its failure must reach the report under each check that
relied on it. The loader records :class:`Gap` entries with :meth:`Gaps.guard`, and each check hands
them on with :meth:`Gaps.report`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fmdoctor.engine.errors import describe_aws_failure

if TYPE_CHECKING:
    from fmdoctor.engine.context import CheckContext


class SourceError(Exception):
    """A non-AWS source failed or answered nonsense: IMDS unreachable, ``find`` missing, a malformed event."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Gap:
    unverified: str
    code: str
    message: str = ""
    iam_action: str | None = None


class Gaps(list[Gap]):
    def add(self, unverified: str, code: str, message: str = "", iam_action: str | None = None) -> None:
        self.append(Gap(unverified, code, message, iam_action))

    @contextlib.contextmanager
    def guard(self, unverified: str) -> Iterator[None]:
        """Like ``ctx.guard``: an AWS failure or :class:`SourceError` becomes a gap; a bug still surfaces."""
        try:
            yield
        except SourceError as exc:
            self.add(unverified, exc.code, exc.message)
        except Exception as exc:
            failure = describe_aws_failure(exc)
            if failure is None:
                raise
            self.add(unverified, failure.code, failure.message, failure.iam_action)

    def report(self, ctx: CheckContext) -> None:
        for gap in self:
            ctx.unverified(gap.unverified, gap.code, gap.message, gap.iam_action)
