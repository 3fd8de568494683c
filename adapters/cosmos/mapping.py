"""The JSON document of a domain record, and the record of a document.

The domain's records are frozen dataclasses (``domain/records.py``, ``domain/deferral.py``,
``domain/circuit.py``); this maps them to and from their JSON form, driven by their fields and type
hints:

- keys are the field names in camelCase (``order_id`` -> ``orderId``), in field order;
- timestamps are ``timefmt.to_text`` (fixed-width UTC text, so Cosmos DB string order is time order)
  and are read back as UTC ``datetime`` (any ISO 8601 text with an offset or ``Z``);
- a field whose ``metadata`` names a reader (``domain.jsonvalues.READ_AS``) is read by it: one an older version
  stored in another form;
- enums by value; nested records, lists and dicts recursively; ``dict[str, Any]`` values (agent
  results, undo data) are JSON already and are copied as they are;
- ``version`` is never part of a document: the store fills it from the item (its ``_etag``);
- a document whose ``schemaVersion`` is above its kind's (the field's default) does not fit: the newer version
  that wrote it changed what an older one must not read past;
- reading gives a missing key its field's default and keeps the keys a record (or an entry inside it)
  does not know in its ``unknown_keys``, if it has that field (a newer writer's field, read by the older
  code during a rolling upgrade or after a rollback; never a key that starts with ``_``, Cosmos DB's
  ``_etag``, ``_ts``...); a record without the field ignores them. A document that does not fit raises
  ``DocumentError`` naming the field;
- ``to_document`` writes a record's own fields only (the operator API's views, activity payloads);
  ``to_document(record, stored=True)``, the store's (``documents.document_of``), writes back beside them
  the ``unknown_keys`` of the record and of every entry inside it, unchanged (a field of the record or
  entry wins over an unknown key of the same name).

The same JSON form is the operator API's view of a record and the body of the ``PaymentNotified``
event."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, Protocol, Union, get_args, get_origin, get_type_hints

from domain.jsonvalues import (
    READ_AS,
    Invalid,
    Read,
    any_value,
    boolean,
    camel,
    dict_of,
    list_of,
    optional,
    optional_of,
    problem_kind,
    shown,
    text,
    timestamp,
)
from domain.timefmt import to_text

__all__ = ["NOT_STORED", "DocumentError", "Record", "camel", "from_document", "to_document", "unknown_keys_of"]

# Fields of a record that are never written to nor read from its document.
NOT_STORED = frozenset({"version", "unknown_keys"})


class Record(Protocol):
    """A dataclass instance (what ``dataclasses.fields`` and ``dataclasses.replace`` take)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


class DocumentError(ValueError):
    """A document that is not a valid record of its kind. ``field`` is the path of the first bad value
    in document keys (``steps.charge-payment.startedAt``; empty: the document itself); ``shape`` the same path
    with list indices and map keys as ``*`` (``steps.*.startedAt``: ``Invalid.shape``)."""

    def __init__(self, kind: str, field: str, problem: str, shape: str | None = None) -> None:
        self.kind = kind
        self.field = field
        self.problem = problem
        self.shape = field if shape is None else shape
        where = f"field {field}" if field else "the document"
        super().__init__(f"invalid {kind} document: {where}: {problem}")

    @property
    def signature(self) -> str:
        """How the document is broken, the same for every document broken the same way: its kind, where in the
        schema and what was expected (``StateRecord:failureCount:expected an integer``), never the value met,
        the document's id, a list index or a map key (``problem_kind``, ``shape``)."""
        return f"{self.kind}:{self.shape or '-'}:{problem_kind(self.problem)}"


type _Write = Callable[[Any], Any] | None


# --- record -> document ----------------------------------------------------------------------------


def to_document(record: Record, *, stored: bool = False) -> dict[str, Any]:
    """The JSON document of ``record`` (new containers throughout: changing it never changes the record).
    ``stored``: with the ``unknown_keys`` of the record and of every entry inside it (what the store writes)."""
    doc: dict[str, Any] = {}
    for name, key, _, write, write_stored, _ in _plan(type(record)):
        value = getattr(record, name)
        writer = write_stored if stored else write
        doc[key] = value if writer is None or value is None else writer(value)
    if stored and _KEEPS_UNKNOWN in _field_names(type(record)):
        for key, value in (getattr(record, _KEEPS_UNKNOWN) or {}).items():
            doc.setdefault(key, _json(value))
    return doc


def _stored_document(record: Record) -> dict[str, Any]:
    return to_document(record, stored=True)


def _writer(hint: Any, stored: bool = False) -> _Write:
    """How a value of type ``hint`` is written (None: as it is; None values are always written as null);
    ``stored``: a record inside it with its unknown keys."""
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return _writer(optional_of(hint), stored)
    if origin is list:
        item = _writer(get_args(hint)[0], stored)
        return list if item is None else lambda value: [None if v is None else item(v) for v in value]
    if origin is dict:
        entry = _writer(get_args(hint)[1], stored)
        return dict if entry is None else lambda value: {k: None if v is None else entry(v) for k, v in value.items()}
    if hint is Any:
        return _json
    if hint is datetime:
        return to_text
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _enum_value
    if hint in (bool, int, float, str):
        return None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _stored_document if stored else to_document
    raise TypeError(f"unsupported field type {hint!r}")


def _enum_value(value: Enum) -> Any:
    return value.value


def _json(value: Any) -> Any:
    """A copy of a JSON value (an agent's result, an undo's data) with plain JSON types only."""
    kind = type(value)
    if value is None or kind is str or kind is int or kind is float or kind is bool:
        return value
    if kind is dict:
        return {_key(k): _json(v) for k, v in value.items()}
    if kind is list:
        return [_json(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, str | int | float):
        return value
    if isinstance(value, datetime):
        return to_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_document(value)
    if isinstance(value, Mapping):
        return {_key(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    raise TypeError(f"{kind.__name__} value has no JSON form: {value!r}")


def _key(key: object) -> str:
    if isinstance(key, Enum):
        key = key.value
    if not isinstance(key, str):
        raise TypeError(f"a JSON object key must be a string, not {key!r}")
    return key


# --- document -> record ----------------------------------------------------------------------------


def from_document[R: Record](kind: type[R], doc: Mapping[str, Any]) -> R:
    """The record of ``doc``; ``DocumentError`` naming the field if it does not fit ``kind``."""
    try:
        return _read_record(kind, doc)  # type: ignore[no-any-return]
    except Invalid as exc:
        raise DocumentError(kind.__name__, ".".join(exc.path), exc.problem, ".".join(exc.shape)) from None


def _read_record(kind: type[Any], doc: Any) -> Any:
    if type(doc) is not dict and not isinstance(doc, Mapping):
        raise Invalid(f"expected a JSON object, got {shown(doc)}")
    values: dict[str, Any] = {}
    for name, key, read, _, _, required in _plan(kind):
        value = doc.get(key, _ABSENT)
        if value is _ABSENT:
            if required:
                raise Invalid("missing", (key,))
            continue  # the field's default
        try:
            values[name] = read(value)
        except Invalid as exc:
            raise exc.under(key) from None
    _readable_version(kind, values)
    if _KEEPS_UNKNOWN in _field_names(kind):
        values[_KEEPS_UNKNOWN] = unknown_keys_of(kind, doc) or None
    return kind(**values)


def _readable_version(kind: type[Any], values: dict[str, Any]) -> None:
    """A document whose ``schemaVersion`` is above its kind's (``SCHEMA_VERSION``, the field's default) is a newer
    version's that this one must not read past (a change of meaning its own fields cannot carry): it does not fit,
    and no reader writes over a document that does not fit."""
    version = values.get("schema_version")
    if version is None:
        return
    field = kind.__dataclass_fields__["schema_version"]
    if isinstance(field.default, int) and version > field.default:
        raise Invalid(
            f"a newer version's document (schema {field.default} at most here), got {version}", (camel(field.name),)
        )


_ABSENT: Any = object()
# The field of a record (or of an entry inside one) that holds its document's keys this code does not know.
_KEEPS_UNKNOWN = "unknown_keys"


def _field_names(kind: type[Any]) -> frozenset[str]:
    names = _names.get(kind)
    if names is None:
        names = _names[kind] = frozenset(f.name for f in dataclasses.fields(kind))
    return names


_names: dict[type[Any], frozenset[str]] = {}


def unknown_keys_of(kind: type[Record], doc: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``doc`` that are no field of ``kind`` (a newer version's fields), with their values (copied:
    the record never shares a container with the document); not Cosmos DB's system properties (``_etag``,
    ``_ts``...: every key that starts with ``_``)."""
    known = _keys.get(kind)
    if known is None:
        known = _keys[kind] = frozenset(key for _, key, _, _, _, _ in _plan(kind))
    return {key: _json(value) for key, value in doc.items() if key not in known and not key.startswith("_")}


_keys: dict[type[Any], frozenset[str]] = {}


type _Plan = tuple[tuple[str, str, Read, _Write, _Write, bool], ...]
_plans: dict[type[Any], _Plan] = {}


def _plan(kind: type[Any]) -> _Plan:
    """Per stored field of the dataclass ``kind``: its name, its document key, its reader, its writer
    and whether the document must have it (no default). Worked out once per class."""
    plan = _plans.get(kind)
    if plan is None:
        plan = _plans[kind] = _make_plan(kind)
    return plan


def _make_plan(kind: type[Any]) -> _Plan:
    if not dataclasses.is_dataclass(kind):
        raise TypeError(f"{kind!r} is not a dataclass")
    hints = get_type_hints(kind)
    fields = [f for f in dataclasses.fields(kind) if f.name not in NOT_STORED]
    return tuple(
        (
            f.name,
            camel(f.name),
            f.metadata.get(READ_AS) or _reader(hints[f.name]),
            _writer(hints[f.name]),
            _writer(hints[f.name], stored=True),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in fields
    )


def _reader(hint: Any) -> Read:
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return optional(_reader(optional_of(hint)))
    if origin is list:
        return list_of(_reader(get_args(hint)[0]))
    if origin is dict:
        key, value = get_args(hint)
        if key is not str:
            raise TypeError(f"unsupported dict key type {key!r}")
        return dict_of(_reader(value))
    if hint is Any:
        return any_value
    if hint is datetime:
        return timestamp
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _enum(hint)
    if hint is bool:
        return boolean
    if hint is int:
        return _int
    if hint is float:
        return _float
    if hint is str:
        return text
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        _plan(hint)  # unsupported field types fail here, not on the first read
        return lambda value: _read_record(hint, value)
    raise TypeError(f"unsupported field type {hint!r}")


def _enum(kind: type[Enum]) -> Read:
    def read_enum(value: Any) -> Enum:
        try:
            return kind(value)
        except ValueError:
            allowed = ", ".join(repr(member.value) for member in kind)
            raise Invalid(f"expected one of {allowed}, got {shown(value)}") from None

    return read_enum


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise Invalid(f"expected an integer, got {shown(value)}")


def _float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise Invalid(f"expected a number, got {shown(value)}")
