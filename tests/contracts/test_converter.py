"""The one converter of the activity protocol (``contracts.converter``), on types made up here: the
key order is the field order, each marker keeps or leaves out exactly the keys it says, and every
kind of field refuses what does not fit with a ``ProtocolError`` that names the key."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import pytest

from contracts.activities import AgentAnswer, UndoEntry, parse_agent_answer, reply_request_id
from contracts.converter import (
    FROM_NUMBER,
    NULL_IS_DEFAULT,
    OMIT_NONE,
    ProtocolError,
    Wire,
    WrittenIf,
    from_json,
    to_json,
)
from tests.orchestrators.test_activity_protocol import REQUEST


@dataclass(frozen=True)
class Inner(Wire):
    name: str
    size: int = 1


@dataclass(frozen=True, kw_only=True)
class Sample(Wire):
    reply_to: Annotated[str | None, WrittenIf("reply_to_known")] = None
    reply_to_known: bool = True
    owned: Literal[True] = field(default=True, init=False)
    order_id: str
    count: int
    ratio: float
    flag: bool
    colour: Literal["red", "green"]
    at: datetime
    note: str | None
    inner: Inner
    items: list[Inner]
    by_name: dict[str, str]
    anything: Any
    maybe: Annotated[int | None, OMIT_NONE] = None
    tries: Annotated[int, FROM_NUMBER] = 3
    extra: Annotated[dict[str, str], NULL_IS_DEFAULT] = field(default_factory=dict)
    waiting: bool = False


AT = datetime(2026, 3, 1, 8, 0, 30, tzinfo=UTC)
SAMPLE = Sample(
    reply_to="q",
    order_id="o1",
    count=2,
    ratio=0.5,
    flag=True,
    colour="red",
    at=AT,
    note=None,
    inner=Inner("a", 2),
    items=[Inner("b")],
    by_name={"x": "y"},
    anything=[1, {"a": None}],
)
SAMPLE_JSON = {
    "replyTo": "q",
    "owned": True,
    "orderId": "o1",
    "count": 2,
    "ratio": 0.5,
    "flag": True,
    "colour": "red",
    "at": "2026-03-01T08:00:30.000000Z",
    "note": None,
    "inner": {"name": "a", "size": 2},
    "items": [{"name": "b", "size": 1}],
    "byName": {"x": "y"},
    "anything": [1, {"a": None}],
    "tries": 3,
    "extra": {},
    "waiting": False,
}


def test_the_keys_are_the_fields_in_camel_case_in_field_order_and_read_back_the_same() -> None:
    written = SAMPLE.to_json()
    assert json.dumps(written) == json.dumps(SAMPLE_JSON)  # the order too
    assert Sample.from_json(json.loads(json.dumps(written))) == SAMPLE


def test_omit_none_leaves_the_key_out_only_when_none_and_an_absent_key_reads_as_the_default() -> None:
    assert "maybe" not in SAMPLE.to_json()
    with_it = Sample.from_json({**SAMPLE_JSON, "maybe": 7})
    assert with_it.maybe == 7 and with_it.to_json()["maybe"] == 7
    assert list(with_it.to_json()).index("maybe") == list(SAMPLE_JSON).index("anything") + 1
    assert Sample.from_json({**SAMPLE_JSON, "maybe": None}).maybe is None
    assert "maybe" not in Sample.from_json({**SAMPLE_JSON, "maybe": None}).to_json()


def test_a_note_without_omit_none_is_written_as_null() -> None:
    assert SAMPLE.to_json()["note"] is None
    assert Sample.from_json({k: v for k, v in SAMPLE_JSON.items() if k != "note"}).note is None


def test_written_if_writes_the_key_only_when_known_even_as_null_and_reads_whether_it_was_there() -> None:
    unknown = Sample.from_json({k: v for k, v in SAMPLE_JSON.items() if k != "replyTo"})
    assert (unknown.reply_to, unknown.reply_to_known) == (None, False)
    assert "replyTo" not in unknown.to_json() and "replyToKnown" not in unknown.to_json()
    null = Sample.from_json({**SAMPLE_JSON, "replyTo": None})
    assert (null.reply_to, null.reply_to_known) == (None, True)
    assert list(null.to_json())[:2] == ["replyTo", "owned"] and null.to_json()["replyTo"] is None


def test_the_fields_defaults_fill_absent_keys_and_null_is_default_only_where_marked() -> None:
    minimal = {k: v for k, v in SAMPLE_JSON.items() if k not in ("tries", "extra", "waiting")}
    read = Sample.from_json(minimal)
    assert (read.tries, read.extra, read.waiting) == (3, {}, False)
    assert Sample.from_json({**SAMPLE_JSON, "extra": None}).extra == {}
    with pytest.raises(ProtocolError, match="'waiting': expected true or false, got None"):
        Sample.from_json({**SAMPLE_JSON, "waiting": None})


def test_from_number_truncates_any_number_and_refuses_the_rest() -> None:
    assert Sample.from_json({**SAMPLE_JSON, "tries": 2.0}).tries == 2
    assert type(Sample.from_json({**SAMPLE_JSON, "tries": 2.9}).tries) is int
    with pytest.raises(ProtocolError, match="'tries'"):
        Sample.from_json({**SAMPLE_JSON, "tries": "2"})


def test_a_float_keeps_an_integer_as_it_came() -> None:
    read = Sample.from_json({**SAMPLE_JSON, "ratio": 60})
    assert json.dumps(read.to_json()["ratio"]) == "60"


def test_a_constant_is_written_where_it_stands_and_checked_on_reading() -> None:
    assert list(SAMPLE.to_json())[1] == "owned"
    with pytest.raises(ProtocolError, match="'owned': expected one of True, got False"):
        Sample.from_json({**SAMPLE_JSON, "owned": False})


@pytest.mark.parametrize(
    ("key", "bad", "where"),
    [
        ("orderId", 5, "'orderId': expected a string"),
        ("orderId", None, "'orderId': expected a string"),
        ("count", True, "'count': expected an integer"),
        ("count", 1.5, "'count': expected an integer"),
        ("count", "1", "'count': expected an integer"),
        ("ratio", "0.5", "'ratio': expected a number"),
        ("ratio", False, "'ratio': expected a number"),
        ("flag", 1, "'flag': expected true or false"),
        ("colour", "blue", "'colour': expected one of 'red', 'green'"),
        ("colour", None, "'colour': expected one of"),
        ("at", "tomorrow", "'at'"),
        ("at", 17, "'at': expected a timestamp text"),
        ("note", 3, "'note': expected a string"),
        ("inner", "a", "'inner': expected a JSON object"),
        ("inner", {"size": 2}, "'inner.name': expected a string"),
        ("inner", {"name": "a", "size": "2"}, "'inner.size': expected an integer"),
        ("items", {"name": "b"}, "'items': expected a JSON array"),
        ("items", [{"name": "b"}, {"name": 1}], "'items.1.name': expected a string"),
        ("byName", ["x"], "'byName': expected a JSON object"),
        ("byName", {"x": 1}, "'byName.x': expected a string"),
        ("maybe", "7", "'maybe': expected an integer"),
    ],
)
def test_a_value_that_does_not_fit_its_kind_is_refused_naming_the_key(key: str, bad: Any, where: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(where)):
        Sample.from_json({**SAMPLE_JSON, key: bad})


def test_a_required_key_that_is_absent_is_refused_and_so_is_a_non_object() -> None:
    with pytest.raises(ProtocolError, match="'count'"):
        Sample.from_json({k: v for k, v in SAMPLE_JSON.items() if k != "count"})
    with pytest.raises(ProtocolError, match="Sample: expected a JSON object, got list"):
        Sample.from_json([SAMPLE_JSON])
    with pytest.raises(ProtocolError, match="Inner: expected a JSON object, got NoneType"):
        from_json(Inner, None)


def test_an_any_value_is_carried_as_it_is() -> None:
    value = {"deep": [1, 2.5, "x", None, {"k": True}]}
    assert Sample.from_json({**SAMPLE_JSON, "anything": value}).to_json()["anything"] == value


def test_an_agent_request_crosses_in_its_activity_form_and_a_bad_one_is_a_protocol_error() -> None:
    from contracts.activities import SendAgentRequestInput

    sent = SendAgentRequestInput.from_json({"queue": "q", "request": REQUEST})
    assert json.dumps(sent.to_json()) == json.dumps({"queue": "q", "request": REQUEST})
    with pytest.raises(ProtocolError, match="'request': not an agent request"):
        SendAgentRequestInput.from_json({"queue": "q", "request": {**REQUEST, "attempt": 0}})
    with pytest.raises(ProtocolError, match="'request': expected a JSON object"):
        SendAgentRequestInput.from_json({"queue": "q", "request": None})


def test_a_nested_type_with_its_own_reader_and_writer_is_read_and_written_by_them() -> None:
    entry = {"seq": 2, "step": "charge-payment", "agent": "payment", "data": {"c": 1}, "at": "x", "outcome": None}

    @dataclass(frozen=True)
    class Log(Wire):
        entries: list[UndoEntry]

    read = from_json(Log, {"entries": [entry]})
    assert (read.entries[0].seq, read.entries[0].step, read.entries[0].data) == (2, "charge-payment", {"c": 1})
    assert json.dumps(to_json(read)) == json.dumps({"entries": [entry]})  # the document, "at" and its order kept
    with pytest.raises(ProtocolError, match=re.escape("'entries.0': 'seq': expected an integer")):
        from_json(Log, {"entries": [{**entry, "seq": "2"}]})


def test_the_agents_reply_reads_as_the_dict_code_read_it() -> None:
    ok = parse_agent_answer({"requestId": "r", "outcome": "succeeded", "result": None})
    assert ok == AgentAnswer(succeeded=True) and ok.step_result == {}
    assert parse_agent_answer({"outcome": "ok"}).succeeded is False  # only "succeeded" succeeds
    odd = parse_agent_answer({"outcome": "failed", "transient": 1, "dependencyOpen": "yes", "error": 5})
    assert (odd.transient, odd.dependency_open, odd.error) == (True, True, 5)
    assert parse_agent_answer({"outcome": "failed", "result": [1]}).step_result == [1]  # carried as it came
    with pytest.raises(ProtocolError, match="'outcome' is missing"):
        parse_agent_answer({"requestId": "r"})
    with pytest.raises(ProtocolError, match="expected a JSON object"):
        parse_agent_answer("succeeded")
    assert reply_request_id({"requestId": "r", "junk": True}) == "r"
    assert reply_request_id({}) is None


def test_an_undo_entry_built_from_its_fields_writes_them_and_reads_back_the_same() -> None:
    entry = UndoEntry(seq=2, step="charge-payment", agent="payment", data={"chargeId": "C-1"})
    written = entry.to_json()
    fields = {"seq": 2, "step": "charge-payment", "agent": "payment", "data": {"chargeId": "C-1"}, "outcome": None}
    assert json.dumps(written) == json.dumps(fields)
    assert UndoEntry.from_json(written) == entry and UndoEntry.from_json(written).document == written
