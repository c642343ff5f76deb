"""moto's per-request, per-service and per-mock costs, removed without changing what moto answers.

- Every ``mock_aws`` start registers about 1,300 URL patterns with ``responses`` (for code that calls AWS
  through ``requests``), building a new ``CallbackResponse`` for each. Built from the same method, pattern and
  callback they are interchangeable, so each is built once and handed out again with an empty call list.
- Every request moto serves lists its response class's methods with ``inspect.getmembers`` to find the action.
  A response class's methods change only when one is added, so the list is remembered until then.
- moto serialises each response from the botocore model: for every member of every object it asks six alias
  providers which attribute names to try, and scans the response class's transformers for one whose path ends
  the member's. Both answers depend only on the object's class (and its ``Meta``), the member's shape and its
  parent, the key and the key path, so they are remembered per those; reading the values stays per object.
- moto writes the XML answers it serialises from the model (EC2's and the other query-protocol services') with
  ``xmltodict.unparse``, which sends each element through SAX's ``XMLGenerator`` and validates each name again;
  the same text is written directly here, with each name validated once. Anything else xmltodict can be asked
  for (pretty printing, comments, namespace maps, an ``output`` stream, a second root) is left to xmltodict.
- Reading a request, moto parses each timestamp with botocore's dateutil-based parser (a PutMetricData of 1,000
  datapoints has 1,000) and asks, for each structure of a query-protocol request, whether any parameter starts
  with its prefix by scanning them all (a p5 RunInstances has hundreds of each). Timestamps are read with the
  engine's parser, to the same naive UTC value, and the prefix is looked up in the parameters sorted once.
- moto reads each service's model (to parse its requests and write its answers) through a new loader of its
  own (``moto.core.utils._load_service_model``), and a new loader lists every service directory of botocore's
  data and of moto's extras again (thousands of ``stat`` calls, about 15 ms) before reading one model. A loader
  only reads files that do not change while the process runs and caches what it read, so one moto loader
  serves every service: the directories are listed once, the models are read as before (with moto's extras),
  their JSON objects as plain dicts, as the engine's loader reads them (fmdoctor.engine.api.PlainJSONFileLoader).

The test suite starts about 600 mocks and makes thousands of requests; each of these cost it between about one
and five percent of its CPU.
"""

from __future__ import annotations

from typing import Any


def install() -> None:
    """Called once, by :func:`fmdoctor.demo.moto_compat.install`, which guards against a second time."""
    _remember_response_methods()
    _remember_attribute_names()
    _reuse_url_patterns()
    _write_xml_directly()
    _read_request_timestamps_directly()
    _find_parameter_prefixes_in_sorted_keys()
    _one_model_loader()


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


def _remember_attribute_names() -> None:
    from moto.core import serialize
    from moto.core.utils import get_value

    picker = getattr(serialize, "AttributePicker", None)
    if picker is None or not hasattr(picker, "get_possible_keys") or not hasattr(serialize, "MISSING"):
        return  # a moto that picks attributes another way
    missing = serialize.MISSING
    names: dict[tuple[Any, ...], tuple[str, ...]] = {}
    transforms: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}

    def possible_keys(self: Any, context: Any) -> tuple[str, ...]:
        obj, shape = context.obj, context.shape
        # Everything the alias providers read: the object's class and Meta, the shape, the parent moto hangs on
        # it while serialising a structure (absent on a shape it has not yet walked), the key, and the providers.
        key = (type(self), tuple(self.alias_providers), obj.__class__, getattr(obj, "Meta", None), shape,
               getattr(shape, "parent", None), context.key)
        found = names.get(key)
        if found is None:
            found = names.setdefault(key, tuple(self.get_possible_keys(context)))
        return found

    def transform_for(table: dict[str, Any], key_path: str) -> Any:
        if not table:
            return None
        # Held with the table, so its id is not reused while remembered (the tables are class attributes).
        held = transforms.get(id(table))
        if held is None or held[0] is not table:
            held = transforms[id(table)] = (table, {})
        remembered = held[1]
        if key_path not in remembered:
            remembered[key_path] = next((t for path, t in table.items() if key_path.endswith(path)), None)
        return remembered[key_path]

    def __call__(self: Any, context: Any) -> Any:  # noqa: N807 (moto's method, replaced)
        obj = context.obj
        for possible_key in possible_keys(self, context):
            value = get_value(obj, possible_key, missing)
            if value is not missing:
                break
        else:
            value = None
        transform = transform_for(self.response_transformers, f"{context.key_path}.{context.key}")
        return value if transform is None else transform(value)

    __call__.__wrapped__ = picker.__call__  # type: ignore[attr-defined]  # moto's own, for the tests to compare
    picker.__call__ = __call__


def _reuse_url_patterns() -> None:
    from moto.core import models
    from responses import CallList

    built_by = getattr(models, "CallbackResponse", None)
    if built_by is None or not hasattr(models.MockAWS, "_enable_patching"):
        return  # a moto that registers its patterns another way
    built: dict[tuple[Any, ...], Any] = {}

    def callback_response(method: str, url: Any, callback: Any, **kwargs: Any) -> Any:
        if kwargs:
            return built_by(method=method, url=url, callback=callback, **kwargs)
        key = (method, url, callback)  # moto's patterns are module constants; re.compile caches its catch-all
        response = built.get(key)
        if response is None:
            response = built[key] = built_by(method=method, url=url, callback=callback)
        else:
            response._calls = CallList()  # as a new one starts: no calls recorded
        return response

    models.CallbackResponse = callback_response


class _NotPlain(Exception):
    """The document needs something only xmltodict does (or raises), so xmltodict writes it."""


_XML_DECLARATION = '<?xml version="1.0" encoding="utf-8"?>\n'


def unparse_plain(document: Any, full_document: bool = True, short_empty_elements: bool = False) -> str:
    """``xmltodict.unparse(document, full_document=..., short_empty_elements=...)``'s text, for a document of
    dicts, lists and scalars with ``@`` attributes and ``#text``; raises :class:`_NotPlain` for anything else."""
    from xml.sax.saxutils import escape, quoteattr

    from xmltodict import _convert_value_to_string as _text  # bools as "true"/"false", bytes decoded

    parts: list[str] = [_XML_DECLARATION] if full_document else []
    write = parts.append

    def emit(key: Any, value: Any, depth: int) -> None:
        if key not in _VALID_NAMES:
            _check_name(key)
        if isinstance(value, (list, tuple)):
            items = value
        elif not hasattr(value, "__iter__") or isinstance(value, (str, bytes, bytearray, memoryview, dict)):
            items = (value,)
        else:
            raise _NotPlain  # a generator would be used up before xmltodict could write it
        if full_document and depth == 0 and len(items) > 1:
            raise _NotPlain  # xmltodict's "document with multiple roots"
        for item in items:
            attributes = ""
            children: list[tuple[Any, Any]] = []
            if isinstance(item, dict):
                text = ""
                for child_key, child in item.items():
                    if child_key == "#text":
                        text = "" if child is None else _text(child)
                    elif isinstance(child_key, str) and child_key.startswith("@"):
                        if child_key == "@xmlns" and isinstance(child, dict):
                            raise _NotPlain
                        name = child_key[1:]
                        if name not in _VALID_NAMES:
                            _check_name(name)
                        attributes += f" {name}={quoteattr('' if child is None else _text(child))}"
                    # An empty list or tuple writes no element: xmltodict skips the one and loops over the other.
                    elif not (isinstance(child, (list, tuple)) and not child):
                        children.append((child_key, child))
            else:
                text = "" if item is None else _text(item)
            if not children and not text:  # XMLGenerator shortens a tag with nothing written inside it
                write(f"<{key}{attributes}/>" if short_empty_elements else f"<{key}{attributes}></{key}>")
                continue
            write(f"<{key}{attributes}>")
            for child_key, child in children:
                emit(child_key, child, depth + 1)
            if text:
                write(escape(text))
            write(f"</{key}>")

    roots = 0
    for key, value in document.items():
        roots += 1
        if full_document and roots > 1:
            raise _NotPlain
        emit(key, value, 0)
    if full_document and not roots:
        raise _NotPlain
    return "".join(parts)


_VALID_NAMES: set[str] = set()


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or name == "#comment":  # xmltodict writes comments, and refuses other keys
        raise _NotPlain
    from xmltodict import _validate_name

    try:
        _validate_name(name, "element")
    except ValueError as exc:
        raise _NotPlain from exc  # xmltodict raises it, with its own message
    _VALID_NAMES.add(name)


def _write_xml_directly() -> None:
    import types

    import xmltodict
    from moto.core import serialize

    if getattr(serialize, "xmltodict", None) is not xmltodict or not all(
            hasattr(xmltodict, name) for name in ("_validate_name", "_convert_value_to_string")):
        return  # a moto that writes XML another way, an xmltodict without these steps, or already installed
    original = xmltodict.unparse

    def unparse(input_dict: Any, output: Any = None, encoding: str = "utf-8", full_document: bool = True,
                short_empty_elements: bool = False, **kwargs: Any) -> Any:
        if output is None and encoding == "utf-8" and set(kwargs) <= {"pretty"} and not kwargs.get("pretty"):
            try:
                return unparse_plain(input_dict, full_document, short_empty_elements)
            except _NotPlain:
                pass
        return original(input_dict, output, encoding, full_document, short_empty_elements, **kwargs)

    unparse.__wrapped__ = original  # type: ignore[attr-defined]
    proxy = types.ModuleType("xmltodict")
    proxy.__dict__.update(vars(xmltodict))
    proxy.unparse = unparse  # type: ignore[attr-defined]
    serialize.xmltodict = proxy  # type: ignore[attr-defined]


def _read_request_timestamps_directly() -> None:
    from datetime import UTC

    from moto.core import parse

    from fmdoctor.engine.timestamps import parse_timestamp

    original = getattr(parse, "default_timestamp_parser", None)
    if original is None or hasattr(original, "__wrapped__"):
        return  # a moto that parses request timestamps another way, or already installed

    def default_timestamp_parser(value: str) -> Any:
        # moto's own: botocore's parse (the engine's gives the same instant), as a naive datetime in UTC
        return parse_timestamp(value).astimezone(UTC).replace(tzinfo=None)

    default_timestamp_parser.__wrapped__ = original  # type: ignore[attr-defined]
    parse.default_timestamp_parser = default_timestamp_parser


def _find_parameter_prefixes_in_sorted_keys() -> None:
    import bisect
    import threading

    from moto.core import parse

    parser = getattr(parse, "QueryParser", None)
    original = getattr(parser, "_gonna_recurse", None)
    if original is None or hasattr(original, "__wrapped__"):
        return  # a moto that reads query parameters another way, or already installed
    last = threading.local()  # one request is parsed on one thread, and asks about the same parameters each time

    def _gonna_recurse(self: Any, query_params: Any, prefix: str) -> bool:
        if prefix == "":
            return False
        held = getattr(last, "held", None)
        if held is None or held[0] is not query_params or held[1] != len(query_params):
            try:
                held = last.held = (query_params, len(query_params), sorted(query_params))
            except TypeError:  # keys that do not sort: moto's own scan
                return bool(original(self, query_params, prefix))
        keys = held[2]
        # Sorted, every key that starts with the prefix follows it at once.
        at = bisect.bisect_left(keys, prefix)
        return not (at < len(keys) and keys[at].startswith(prefix))

    _gonna_recurse.__wrapped__ = original  # type: ignore[attr-defined]
    parser._gonna_recurse = _gonna_recurse  # type: ignore[union-attr]


def _one_model_loader() -> None:
    import functools

    from moto.core import utils

    original = getattr(utils, "create_loader", None)
    if original is None or hasattr(original, "__wrapped__"):
        return  # a moto that loads its models another way, or already installed
    from fmdoctor.engine.api import PlainJSONFileLoader

    @functools.cache
    def create_loader() -> Any:
        # Built at the first call, as moto built each of its loaders (moto's own create_loader, extras included),
        # reading JSON as the engine's loader does (plain dicts, in the file's order).
        loader = original()
        if hasattr(loader.file_loader, "_load_file"):
            loader.file_loader = PlainJSONFileLoader()
        return loader

    create_loader.__wrapped__ = original  # type: ignore[attr-defined]
    utils.create_loader = create_loader  # type: ignore[attr-defined]
