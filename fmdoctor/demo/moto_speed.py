"""One of moto's per-request costs, removed without changing what moto answers.

Every request moto serves lists its response class's methods with ``inspect.getmembers`` to find the action; the
test suite makes thousands of requests, and that listing was a few percent of its CPU. A response class's methods
change only when one is added, so the list is remembered until then.
"""

from __future__ import annotations

from typing import Any


def install() -> None:
    """Called once, by :func:`fmdoctor.demo.moto_compat.install`, which guards against a second time."""
    _remember_response_methods()


def _remember_response_methods() -> None:
    from moto.core import responses, utils

    if not hasattr(responses, "method_names_from_class"):
        return  # a moto that finds actions another way
    listed: dict[tuple[type, tuple[int, ...]], frozenset[str]] = {}
    original = utils.method_names_from_class

    def method_names_from_class(clazz: Any) -> frozenset[str]:
        # Keyed by the size of each class's namespace too: a method added later (as moto_compat adds
        # DescribePlacementGroups) is listed, as it would have been.
        key = (clazz, tuple(len(vars(base)) for base in clazz.__mro__))
        names = listed.get(key)
        if names is None:
            names = listed.setdefault(key, frozenset(original(clazz)))
        return names

    responses.method_names_from_class = method_names_from_class  # call_action only asks "action in names"
