"""Reading JSON values by kind, with the path to a bad one: the pieces the two converters share,
``adapters/cosmos/mapping.py`` (a record and its document) and ``contracts/converter.py`` (the
activity protocol). Each reader takes a JSON value and returns it checked (or raises ``Invalid``);
the containers' readers add the key or index to the path of a bad value inside them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, get_args

from domain.timefmt import parse

type Read = Callable[[Any], Any]


class Invalid(Exception):
    """A bad value, with the path to it built while it propagates out of the nested readers. ``shape``: the same
    path with a list's index and a map's key as ``*`` (``history.*.at``, not ``history.17.at``): where in the
    schema the value is bad, the same for every document broken the same way."""

    def __init__(self, problem: str, path: tuple[str, ...] = (), shape: tuple[str, ...] | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path = path
        self.shape = path if shape is None else shape

    def under(self, part: str, *, entry: bool = False) -> Invalid:
        """The same problem one level up, under the key (or, ``entry``, the list index or map key) ``part``."""
        return Invalid(self.problem, (part, *self.path), ("*" if entry else part, *self.shape))


def problem_kind(problem: str) -> str:
    """What an ``Invalid`` problem says without the value it met (``expected an integer``, ``missing``, ``not a
    timestamp``): every problem here names the value after ``, got `` or in a parenthesis or after a colon."""
    return re.split(r", got |\s\(|: ", problem, maxsplit=1)[0]


def camel(name: str) -> str:
    """``order_id`` -> ``orderId``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def optional_of(hint: Any) -> Any:
    """``X`` of ``X | None``; ``TypeError`` for any other union."""
    args = get_args(hint)
    others = [a for a in args if a is not type(None)]
    if len(others) != 1 or len(args) != 2:
        raise TypeError(f"unsupported union {hint!r}: only X | None")
    return others[0]


def optional(read: Read) -> Read:
    return lambda value: None if value is None else read(value)


def list_of(read: Read) -> Read:
    def read_list(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise Invalid(f"expected a JSON array, got {shown(value)}")
        items: list[Any] = []
        for index, item in enumerate(value):
            try:
                items.append(read(item))
            except Invalid as exc:
                raise exc.under(str(index), entry=True) from None
        return items

    return read_list


def dict_of(read: Read) -> Read:
    def read_dict(value: Any) -> dict[str, Any]:
        if type(value) is not dict and not isinstance(value, Mapping):
            raise Invalid(f"expected a JSON object, got {shown(value)}")
        entries: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise Invalid(f"expected string keys, got {key!r}")
            try:
                entries[key] = read(item)
            except Invalid as exc:
                raise exc.under(key, entry=True) from None
        return entries

    return read_dict


def any_value(value: Any) -> Any:
    return value


def timestamp(value: Any) -> datetime:
    if not isinstance(value, str | datetime):
        raise Invalid(f"expected a timestamp text, got {shown(value)}")
    try:
        return parse(value)
    except ValueError as exc:
        raise Invalid(f"not a timestamp ({exc}): {value!r}") from None


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"expected true or false, got {shown(value)}")
    return value


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise Invalid(f"expected a string, got {shown(value)}")
    return value


# The key of a dataclass field's ``metadata`` naming the reader of its stored value in place of its type's
# (``adapters/cosmos/mapping.py``): for a field an older version stored in another form, which a read must still take.
READ_AS = "readAs"


def text_or_whole_number(value: Any) -> str:
    """Text as it is, and a whole JSON number as its digits (what ``str`` of that integer gives).

    For a Service Bus MessageId an older version stored as it came: AMQP lets a sender give a ulong ``message-id``,
    which the SDK hands on as an ``int``, and the app recorded it so in a deferral entry (the text
    ``adapters.servicebus.settlement.message_id_text`` now gives it is its digits). Read strictly, such a document
    no read could map, and its order's submission was handled again later until it was dead-lettered, never
    accepted (red team rt62: tests/deferral/test_redteam62_stored_message_ids.py). A number past 2**53, which
    Cosmos DB may hand back as a float, reads as the digits of that float's whole value."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    raise Invalid(f"expected a string, got {shown(value)}")


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
