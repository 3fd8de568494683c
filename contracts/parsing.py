"""Turning a message body into a contract, or into a dead-letter reason and description."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from contracts.messages import Contract
from domain.ids import is_valid_order_id
from domain.records import MAX_EXACT_INT
from domain.text import carriable, has_lone_surrogate

MAX_BODY_BYTES = 64 * 1024
# No contract nests deeper than a few levels; the json module recurses per level, so a hostile body
# of nested brackets would end in RecursionError instead of a dead-letter reason. Checked before
# parsing, on the raw text.
MAX_NESTING_DEPTH = 32
# How deep a free-form value from outside may nest: it travels inside a reply (``result``, one level)
# and, as a step result, inside an undo request's ``payload`` (two or three); a few levels to spare.
MAX_FREE_FORM_NESTING = MAX_NESTING_DEPTH - 4
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')
SUPPORTED_SCHEMA_VERSIONS = {1}
# An integer literal in a body has at most this many digits: Python refuses to convert more (its
# default ``sys.get_int_max_str_digits``), and converting a longer one costs quadratic time (the guard
# against a denial of service). The range of a typed integer (an amount, a sequence number, an attempt)
# is its contract field's own bound (``contracts/messages.py``: none goes past int64); a free-form JSON
# value the app passes through (an agent's ``result``, a request's ``payload``, an alert's ``details``)
# keeps any integer within this many digits, exactly (a provider's uint64 id is not refused).
MAX_INT_DIGITS = 4300


@dataclass(eq=False)  # hashed and compared by identity, as exceptions are
class InvalidMessage(Exception):
    """A message that can never be processed. ``reason`` is the dead-letter reason (a stable,
    short code); ``description`` says what is wrong and names the field. Not a frozen dataclass: Python
    sets attributes on an exception it carries (``contextlib`` sets ``__traceback__`` when one leaves a
    ``with`` block), which a frozen one turns into ``FrozenInstanceError``, its reason lost."""

    reason: str
    description: str

    def __post_init__(self) -> None:
        # The description quotes the body (a field name, a value): made carriable here, once, for the
        # dead-letter description and the log line alike (domain/text.py).
        self.description = carriable(self.description)

    def __str__(self) -> str:
        return f"{self.reason}: {self.description}"


def parse[ContractT: Contract](body: bytes | str, accepted: Mapping[str, type[ContractT]]) -> ContractT:
    raw = body.encode("utf-8") if isinstance(body, str) else body
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidMessage("BodyTooLarge", f"body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidMessage("NotJson", f"body is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    depth = nesting_depth(text)
    if depth > MAX_NESTING_DEPTH:
        raise InvalidMessage(
            "NestingTooDeep", f"body nests arrays or objects {depth} levels deep; the limit is {MAX_NESTING_DEPTH}"
        )
    try:
        data: Any = json.loads(
            text,
            parse_int=_read_int,
            parse_float=_read_float,
            parse_constant=_no_constant,
            object_pairs_hook=each_name_once,
        )
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise InvalidMessage("NotJson", f"body is not JSON: {exc.msg} at {where}") from None
    except RepeatedName as exc:
        raise InvalidMessage("InvalidFields", str(exc)) from None
    except (ValueError, RecursionError) as exc:  # whatever else the reader refuses: still a reason
        raise InvalidMessage("NotJson", f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidMessage("NotAnObject", f"body is a JSON {type(data).__name__}, not an object")
    kind = data.get("type")
    if not isinstance(kind, str):
        raise InvalidMessage("MissingType", "field 'type' is missing or not a string")
    model = accepted.get(kind)
    if model is None:
        raise InvalidMessage("UnknownType", f"field 'type' is {kind!r}; expected one of {sorted(accepted)}")
    version = data.get("schemaVersion")
    if type(version) is not int:
        raise InvalidMessage("InvalidFields", "field 'schemaVersion' is missing or not an integer")
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise InvalidMessage(
            "UnsupportedSchemaVersion",
            f"field 'schemaVersion' is {_shown(str(version))}; supported: {sorted(SUPPORTED_SCHEMA_VERSIONS)}",
        )
    huge = _out_of_range(data)
    if huge is not None:
        path, number = huge
        raise InvalidMessage(
            "InvalidFields",
            f"field '{'.'.join(path)}': the number {_shown(number.literal)} is out of range "
            f"(an integer has at most {MAX_INT_DIGITS:,} digits, any other number must be a finite 64-bit float)",
        )
    odd = _lone_surrogate(data)
    if odd is not None:
        raise InvalidMessage("InvalidFields", f"{_where(odd)}: {LONE_SURROGATE}")
    try:
        return model.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise InvalidMessage("InvalidFields", describe(exc)) from None
    except (ValueError, ArithmeticError, TypeError) as exc:  # a validator's own error pydantic did not wrap
        raise InvalidMessage("InvalidFields", f"body does not fit {kind}: {type(exc).__name__}: {exc}") from None


# The largest integer a free-form value from outside may hold: what every hop keeps exactly. Messages
# and orchestration histories are JSON text (any integer), but Cosmos DB documents keep numbers as
# IEEE 754 doubles (``domain.records.MAX_EXACT_INT``): past 2**53 a step result or an undo's data would be rounded
# in the state record, silently, after the call took effect (tests/contracts/test_free_form_numbers.py shows both
# sides).
MAX_STORED_INT = MAX_EXACT_INT


def _read_stored_int(literal: str) -> int | _OutOfRange:
    if len(literal.lstrip("-")) <= len(str(MAX_STORED_INT)):
        value = int(literal)
        if -MAX_STORED_INT <= value <= MAX_STORED_INT:
            return value
    return _OutOfRange(literal)


def read_outside_json(text: str) -> Any:
    """JSON from outside the app that it will carry as a free-form value (a remote service's answer,
    ``adapters/remote/http_service.py``), read so that what the app accepts it carries exactly through
    every message, activity and document after this point. Refused here, where it enters, with
    ``ValueError`` naming the place (never later, after the call took effect): an integer outside
    +-``MAX_STORED_INT`` (a Cosmos DB document would round it), a number that is not a finite 64-bit
    float (``1e999``: ``json.loads`` would make it ``inf``, which JSON cannot carry), ``NaN``/``Infinity``
    (not JSON), an object naming a field twice (``{"chargeId": "a", "chargeId": "b"}``: which one the service meant,
    and a refund would need, is a guess), and nesting deeper than a message can hold once the value is inside one
    (``MAX_NESTING_DEPTH`` less the levels of the reply and request envelopes)."""
    depth = nesting_depth(text)
    if depth > MAX_FREE_FORM_NESTING:
        raise ValueError(f"nests arrays or objects {depth} levels deep; the app carries {MAX_FREE_FORM_NESTING}")
    try:
        data: Any = json.loads(
            text,
            parse_int=_read_stored_int,
            parse_float=_read_float,
            parse_constant=_no_constant,
            object_pairs_hook=each_name_once,  # RepeatedName, a ValueError naming the field
        )
    except InvalidMessage as exc:
        raise ValueError(exc.description) from None
    odd = _lone_surrogate(data)
    if odd is not None:
        raise ValueError(f"{_where(odd)}: {LONE_SURROGATE}")
    huge = _out_of_range(data)
    if huge is not None:
        path, number = huge
        where = f"at '{'.'.join(path)}'" if path else "at the top"
        raise ValueError(
            f"the number {_shown(number.literal)} {where} cannot be carried exactly (an integer must be "
            f"within +-{MAX_STORED_INT}, which Cosmos DB documents keep exactly; any other number must be "
            "a finite 64-bit float)"
        )
    return data


def _shown(literal: str) -> str:
    return literal if len(literal) <= 40 else f"{literal[:20]}...{literal[-8:]} ({len(literal)} characters)"


@dataclass(frozen=True)
class _OutOfRange:
    """Stands in, in the parsed body, for a number literal no contract can hold, so that the
    dead-letter description can name the field it is in."""

    literal: str


def _read_int(literal: str) -> int | _OutOfRange:
    """``json.loads``'s reader of integer literals: the value if it has at most ``MAX_INT_DIGITS``
    digits (checked on the text first: Python refuses to convert more). No range: that is the typed
    field's (its contract's bound), and a free-form value keeps its integer as it is."""
    if len(literal.lstrip("-")) <= MAX_INT_DIGITS:
        return int(literal)
    return _OutOfRange(literal)


def _read_float(literal: str) -> float | _OutOfRange:
    """``json.loads``'s reader of number literals with a fraction or exponent: the value if finite."""
    value = float(literal)
    return value if math.isfinite(value) else _OutOfRange(literal)


def _out_of_range(value: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], _OutOfRange] | None:
    """The first out-of-range number in ``value`` and where it is (the body nests at most
    ``MAX_NESTING_DEPTH`` levels, so the recursion is bounded)."""
    if isinstance(value, _OutOfRange):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _out_of_range(item, (*path, str(key)))
        if found is not None:
            return found
    return None


# A JSON string may escape a lone surrogate (``"\\udc80"``) and ``json.loads`` returns it in a ``str``, which
# no UTF-8 encoder takes: not a Service Bus body, a pydantic ``model_dump_json``, an exporter's log line. The
# contracts' typed text refuses it, but a free-form value (``result``, ``payload``, ``details``) or a plain
# ``str`` field (``error``) carried it on, to fail later, past where it came in: an undo request built from a
# step's result that cannot be sent (every compensation round's orchestration failed), an agent's reply that
# cannot be (its request failed until ``MaxDeliveryCountExceeded``). Refused where it enters, anywhere in it.
LONE_SURROGATE = "it is not Unicode text (a lone surrogate, which no UTF-8 encoder takes)"


def _lone_surrogate(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Where the first string (a value or a key) holding a lone surrogate is in ``value``, or None (the
    nesting is bounded as ``_out_of_range``'s is). A key holding one is named by its own path."""
    if isinstance(value, str):
        return path if has_lone_surrogate(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        here = (*path, str(key))
        if isinstance(key, str) and has_lone_surrogate(key):
            return here
        found = _lone_surrogate(item, here)
        if found is not None:
            return found
    return None


def _where(path: tuple[str, ...]) -> str:
    """Where ``_lone_surrogate`` found one, as text that can be carried (the path may hold it, in a key)."""
    return carriable(f"field '{'.'.join(path)}'") if path else "the body"


class RepeatedName(ValueError):
    """A JSON object names a field twice (``each_name_once``); ``name`` is that field."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"field {_shown(name)!r} appears more than once in one object (readers disagree on which counts)"
        )


def each_name_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``json.loads`` ``object_pairs_hook`` refusing an object that names a field twice (``RepeatedName``).
    ``json.loads`` keeps the last value, other readers the first (or refuse the body): ``{"orderId": "a", ...,
    "orderId": "b"}`` or two ``type``s would be one order to a gateway or audit log reading the body and another to
    this app. RFC 8259 leaves such an object's meaning to the reader; I-JSON (RFC 7493) forbids it. Every object,
    at any depth: free-form values too."""
    data: dict[str, Any] = {}
    for name, value in pairs:
        if name in data:
            raise RepeatedName(name)
        data[name] = value
    return data


def _no_constant(name: str) -> Any:
    """``json.loads`` takes ``NaN``, ``Infinity`` and ``-Infinity``, which JSON does not have."""
    raise InvalidMessage("NotJson", f"body is not JSON: {name} is not a JSON value")


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` outside JSON strings (a scan, no recursion). Malformed
    text is fine: it only has to bound what ``json.loads`` would recurse into."""
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth = max(0, depth - 1)
    return deepest


def describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        field = ".".join(str(p) for p in error["loc"]) or "(body)"
        parts.append(f"field '{field}': {error['msg']}")
    more = len(exc.errors()) - 5
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def named_order_id(body: bytes) -> str | None:
    """The ``orderId`` a body names, if it is a valid order id, whether or not the body parses as a
    contract (a message deferred before a rule it now breaks still belongs to its order; one dead-lettered as
    invalid is logged under it). Any body: one that is not UTF-8 JSON, or nests deeper than ``parse`` reads,
    names none. One naming ``orderId`` twice names the last, as ``parse`` read it before it refused such a body
    (a message deferred then is tracked under that order)."""
    try:
        text = body.decode("utf-8")
        if nesting_depth(text) > MAX_NESTING_DEPTH:
            return None
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    order_id = data.get("orderId") if isinstance(data, dict) else None
    return order_id if isinstance(order_id, str) and is_valid_order_id(order_id) else None
