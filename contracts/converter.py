"""The one converter between the activity protocol's types (``contracts/activities.py``) and the
JSON that crosses to and from the activities.

A protocol type is a frozen dataclass deriving from ``Wire``; its fields, in order, are its JSON
object, in order:

- the key is the field name in camelCase (``order_id`` -> ``orderId``);
- the check on reading comes from the type hint: ``str``, ``int`` (never a bool), ``float`` (any
  number, kept as given), ``bool``, ``X | None`` (X or null), ``Literal[...]`` (one of the values),
  ``datetime`` (``timefmt`` text), ``dict[str, X]``, ``list[X]``, ``Any`` (any JSON value as it is),
  another ``Wire`` type (nested object), ``AgentRequest`` (its ``activity_json`` form);
- an absent key reads as the field's default; a field without a default reads an absent key as
  null (so ``str`` refuses it, ``str | None`` is None);
- a field with ``init=False`` (``owned``) is a constant: written as its default, checked on reading;
- ``Annotated[..., <marker>]`` says where a field departs from that:
  ``OMIT_NONE`` (the key is left out when the value is None), ``WrittenIf("flag")`` (the key is
  written only when the bool field ``flag`` is True; ``flag`` is not a key: it reads as whether the
  key was there), ``NULL_IS_DEFAULT`` (null reads as the default too, as older writers sent it),
  ``FROM_NUMBER`` (an ``int`` read from any number, truncated).

A value that does not fit raises ``ProtocolError`` naming the key (``'completes.result'``).
Nothing here knows an activity: ``tests/contracts/test_converter.py`` holds the rules, and
``tests/orchestrators/test_activity_protocol.py`` the JSON that histories recorded."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin, get_type_hints

from pydantic import ValidationError

from contracts.messages import AgentRequest
from domain.jsonvalues import (
    Invalid,
    Read,
    any_value,
    boolean,
    camel,
    dict_of,
    list_of,
    optional,
    optional_of,
    shown,
    text,
    timestamp,
)
from domain.timefmt import to_text

JsonDict = dict[str, Any]


class ProtocolError(ValueError):
    """An activity input or result that is not what the protocol says."""


@dataclasses.dataclass(frozen=True)
class _Marker:
    name: str

    def __repr__(self) -> str:
        return self.name


OMIT_NONE = _Marker("OMIT_NONE")
NULL_IS_DEFAULT = _Marker("NULL_IS_DEFAULT")
FROM_NUMBER = _Marker("FROM_NUMBER")


@dataclasses.dataclass(frozen=True)
class WrittenIf:
    """The key is written only when the bool field ``flag`` is True; ``flag`` reads as whether it was there."""

    flag: str


class Wire:
    """A protocol type: ``to_json`` / ``from_json`` by its fields (see the module's docstring)."""

    def to_json(self) -> JsonDict:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        return from_json(cls, data)


type _Write = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    read: Read
    write: _Write
    default: Any  # _REQUIRED: none
    init: bool
    omit_none: bool
    null_is_default: bool
    written_if: str | None  # the flag field
    flag_of: str | None  # this is the flag of the key of that field


_REQUIRED: Any = object()


# --- the two directions -------------------------------------------------------------------------------


def to_json(value: Any) -> JsonDict:
    """The JSON object of the protocol value ``value`` (JSON values it holds, such as an order, are shared)."""
    fields = _plan(type(value))
    out: JsonDict = {}
    for f in fields:
        if f.flag_of is not None:
            continue
        if f.written_if is not None and not getattr(value, f.written_if):
            continue
        item = getattr(value, f.name)
        if item is None and f.omit_none:
            continue
        out[f.key] = None if item is None else f.write(item)
    return out


def from_json[T](kind: type[T], data: Any) -> T:
    """The ``kind`` of the JSON object ``data``; ``ProtocolError`` naming the key that does not fit."""
    try:
        return _read_object(kind, data)  # type: ignore[no-any-return]
    except Invalid as exc:
        where = ".".join(exc.path)
        raise ProtocolError(f"{where!r}: {exc.problem}" if where else f"{kind.__name__}: {exc.problem}") from None


def _read_object(kind: type[Any], data: Any) -> Any:
    if not isinstance(data, Mapping):
        raise Invalid(f"expected a JSON object, got {type(data).__name__}")
    values: dict[str, Any] = {}
    for f in _plan(kind):
        if f.flag_of is not None:
            continue
        present = f.key in data
        if f.written_if is not None:
            values[f.written_if] = present
        value = data.get(f.key)
        if f.default is not _REQUIRED and (not present or (value is None and f.null_is_default)):
            if f.init:
                continue  # the field's default
            value = f.default
        try:
            read = f.read(value)
        except Invalid as exc:
            raise exc.under(f.key) from None
        if not f.init:
            if read != f.default:
                raise Invalid(f"expected {f.default!r}, got {value!r}", (f.key,))
            continue
        values[f.name] = read
    return kind(**values)


# --- the plan of a type, from its fields and hints ----------------------------------------------------

_plans: dict[type[Any], tuple[_Field, ...]] = {}


def _plan(kind: type[Any]) -> tuple[_Field, ...]:
    plan = _plans.get(kind)
    if plan is None:
        plan = _plans[kind] = _make_plan(kind)
    return plan


def _make_plan(kind: type[Any]) -> tuple[_Field, ...]:
    if not dataclasses.is_dataclass(kind):
        raise TypeError(f"{kind!r} is not a dataclass")
    hints = get_type_hints(kind, include_extras=True)
    fields = dataclasses.fields(kind)
    flags: dict[str, str] = {}
    planned: list[_Field] = []
    for f in fields:
        hint, markers = _split(hints[f.name])
        written_if = next((m.flag for m in markers if isinstance(m, WrittenIf)), None)
        if written_if is not None:
            flags[written_if] = f.name
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = _REQUIRED
        planned.append(
            _Field(
                name=f.name,
                key=camel(f.name),
                read=_reader(hint, from_number=FROM_NUMBER in markers),
                write=_writer(hint),
                default=default,
                init=f.init,
                omit_none=OMIT_NONE in markers,
                null_is_default=NULL_IS_DEFAULT in markers,
                written_if=written_if,
                flag_of=None,
            )
        )
    return tuple(dataclasses.replace(p, flag_of=flags.get(p.name)) for p in planned)


def _split(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    if get_origin(hint) is Annotated:
        return hint.__origin__, hint.__metadata__
    return hint, ()


def _reader(hint: Any, *, from_number: bool = False) -> Read:
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return optional(_reader(optional_of(hint), from_number=from_number))
    if origin is Literal:
        allowed = get_args(hint)
        return lambda value: _one_of(value, allowed)
    if origin is list:
        return list_of(_reader(get_args(hint)[0]))
    if origin is dict or hint is dict:
        return dict_of(_reader(get_args(hint)[1] if get_args(hint) else Any))
    if hint is Any:
        return any_value
    if hint is str:
        return text
    if hint is bool:
        return boolean
    if hint is int:
        return _integer_from_number if from_number else _integer
    if hint is float:
        return _number
    if hint is datetime:
        return timestamp
    if hint is AgentRequest:
        return _request
    if isinstance(hint, type) and issubclass(hint, Wire):
        return _nested(hint)
    raise TypeError(f"unsupported protocol field type {hint!r}")


def _writer(hint: Any) -> _Write:
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        return _writer(optional_of(hint))
    if origin is list:
        item = _writer(get_args(hint)[0])
        return lambda value: [None if v is None else item(v) for v in value]
    if origin is dict or hint is dict:
        value_hint = get_args(hint)[1] if get_args(hint) else Any
        entry = _writer(value_hint)
        return lambda value: {k: None if v is None else entry(v) for k, v in value.items()}
    if hint is datetime:
        return to_text
    if hint is AgentRequest:
        return AgentRequest.activity_json
    if isinstance(hint, type) and issubclass(hint, Wire):
        return _written_by_itself
    return any_value  # text, numbers, booleans, literals, JSON values: as they are


def _nested(kind: type[Wire]) -> Read:
    """A nested protocol object: by its fields, or by its own ``from_json`` where it has one."""
    if kind.from_json.__func__ is Wire.from_json.__func__:  # type: ignore[attr-defined]
        return lambda value: _read_object(kind, value)

    def read(value: Any) -> Any:
        try:
            return kind.from_json(value)
        except ProtocolError as exc:
            raise Invalid(str(exc)) from None

    return read


def _written_by_itself(value: Wire) -> JsonDict:
    return value.to_json()


# --- the checks, one a kind ---------------------------------------------------------------------------


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"expected an integer, got {shown(value)}")
    return value


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(f"expected a number, got {shown(value)}")
    return value


def _integer_from_number(value: Any) -> int:
    return int(_number(value))


def _one_of(value: Any, allowed: tuple[Any, ...]) -> Any:
    if isinstance(value, bool | int | str) and any(value == a and type(value) is type(a) for a in allowed):
        return value
    raise Invalid(f"expected one of {', '.join(repr(a) for a in allowed)}, got {shown(value)}")


def _request(value: Any) -> AgentRequest:
    if not isinstance(value, Mapping):
        raise Invalid(f"expected a JSON object, got {type(value).__name__}")
    try:
        return AgentRequest.model_validate(value)
    except ValidationError as exc:
        raise Invalid(f"not an agent request: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}") from None
