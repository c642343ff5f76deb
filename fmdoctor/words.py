"""Words for people: counts that agree with their noun ('1 finding', '2 findings', never 'call(s)'), and the
names a mistyped one probably meant."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and the noun that agrees with it; ``many`` for irregular plurals ('1 query', '2 queries')."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def suggest(query: str, names: Iterable[str], limit: int = 3) -> list[str]:
    """Names a mistyped ``query`` probably meant: those it begins (``efa-sg`` -> ``efa-sg-self-reference``),
    then those it is close to in spelling (``gpu-node-9`` -> ``gpu-node-6``), at most ``limit``."""
    known = list(dict.fromkeys(n for n in names if n))
    lowered = query.strip().lower()
    if not lowered:
        return []
    begun = [n for n in known if n.lower().startswith(lowered) and n.lower() != lowered]
    close = difflib.get_close_matches(query.strip(), known, n=limit, cutoff=0.6)
    return list(dict.fromkeys(begun + close))[:limit]
