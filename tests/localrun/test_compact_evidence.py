"""What the runner keeps of a finished order, compactly: the audited transitions packed in columns,
the app's structured events as tuples with interned strings, a finished Durable instance's input,
output and custom status packed. Each reader gets back values equal to what was recorded."""

from __future__ import annotations

import gc
import logging
import pickle
import sys
import types
import zlib
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from domain.states import ProcessState
from localrun.audit import Audit, EventRecorder, Transition, TransitionLog
from localrun.durable import history as ev
from localrun.durable import instance as instance_module
from localrun.durable.instance import HISTORIES_LEARN_FROM, Instance
from localrun.packing import LearnedDictionary
from localrun.servicebus import InProcessBroker
from localrun.servicebus import broker as broker_module

T0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def _reachable(root: object) -> list[object]:
    """Every object reachable from ``root`` (not types, modules or functions), each once."""
    seen: set[int] = set()
    found: list[object] = []
    stack = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, _SKIP):
            continue
        seen.add(id(o))
        found.append(o)
        stack.extend(gc.get_referents(o))
    return found


def _size(root: object) -> int:
    return sum(sys.getsizeof(o) for o in _reachable(root))


def _transitions(order: str, n: int) -> list[Transition]:
    # strings built at run time, as the audit gets them (each write's record is parsed anew)
    states = list(ProcessState)
    return [
        Transition(
            at=T0 + timedelta(seconds=i, microseconds=7 * i),
            order_id="".join(["o", order]),
            before=None if i == 0 else states[(i - 1) % len(states)],
            after=states[i % len(states)],
            event="".join(["Step", "Started" if i % 2 else "Succeeded"]),
            by="".join([order, ":1"]),
            expired_at=None if i % 3 else T0 + timedelta(minutes=i),
            detail="" if i % 4 else "".join(["transient: ", str(i)]),
        )
        for i in range(n)
    ]


def test_the_audits_transitions_are_packed_and_read_back_equal():
    audit = Audit()
    recorded = _transitions("1", 14) + _transitions("2", 14)
    for t in recorded:
        audit.transitions.append(t)

    assert list(audit.transitions) == recorded
    assert len(audit.transitions) == 28
    assert audit.transitions[3] == recorded[3] and audit.transitions[-1] == recorded[-1]
    assert audit.transitions[26:] == recorded[26:]  # the simulation reads the new ones by slice
    assert sorted(audit.transitions, key=lambda t: t.at) == sorted(recorded, key=lambda t: t.at)
    assert str(audit.transitions[5].at) == str(recorded[5].at)  # same tzinfo: the report prints times

    held = _reachable(audit.transitions)
    assert not any(isinstance(o, (Transition, datetime)) for o in held)  # no objects per transition
    # an order's id and writer are held once, not once per transition
    assert sum(1 for o in held if isinstance(o, str) and o == "o1") == 1
    assert _size(audit.transitions) / 28 < 120  # bytes a transition (a Transition with its objects: ~350)


def test_a_transition_whose_times_are_not_utc_is_kept_as_it_came():
    other = datetime(2026, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=1)))
    log = TransitionLog()
    odd = Transition(other, "o1", None, ProcessState.PENDING, "Received", "starter", None)
    log.append(odd)
    assert log[0] == odd and log[0].at.tzinfo == odd.at.tzinfo


def test_the_event_recorder_keeps_tuples_and_gives_back_the_events_as_they_were():
    recorder = EventRecorder()
    log = logging.getLogger("test-compact-evidence")
    log.addHandler(recorder)
    log.setLevel(logging.INFO)
    try:
        for i in range(50):
            order = "".join(["o", str(i % 5)])
            log.info("deferred", extra={"event": "MessageDeferred", "orderId": order, "ignored": i})
            log.info("recovered", extra={"event": "DeferredRecovered", "orderId": order, "via": "sweep"})
        log.info("outage", extra={"event": "DependencyRecovered", "dependency": "payment", "outageSeconds": 12.5})
        log.info("not an event")
    finally:
        log.removeHandler(recorder)

    events = recorder.events
    assert len(events) == 101
    assert events[0] == {"event": "MessageDeferred", "orderId": "o0"}
    assert events[1] == {"event": "DeferredRecovered", "orderId": "o0", "via": "sweep"}
    assert events[-1] == {"event": "DependencyRecovered", "dependency": "payment", "outageSeconds": 12.5}
    assert recorder.count("MessageDeferred") == 50
    assert recorder.count("DeferredRecovered", via="sweep") == 50
    assert recorder.count("DeferredRecovered", via="retry") == 0
    assert recorder.count("MessageDeferred", orderId="o3") == 10
    assert recorder.count("MessageDeferred", via=None) == 50  # a field an event lacks reads as None

    assert len(recorder) == 101
    held = _reachable(recorder)
    assert not any(isinstance(o, dict) and "orderId" in o for o in held)  # no dict per event
    assert sum(1 for o in held if isinstance(o, str) and o == "o3") == 1  # interned: held once
    per_event = (_size(recorder._codes) + _size(recorder._values)) / 101
    assert per_event < 40  # bytes an event (a dict with its strings: ~400)


def _finished_instance(output: Any) -> Instance:
    instance = Instance("o1:1", "order_orchestrator", 1, '{"orderId": "o1", "lines": [1, 2, 3]}', T0, T0)
    instance.custom_status = {"step": "ship", "attempt": 1}
    instance.status = OrchestrationRuntimeStatus.Completed
    instance.output = output
    instance.pack_history()
    return instance


def test_a_finished_instance_keeps_its_input_output_and_custom_status_packed():
    output = {"orderId": "o1", "outcome": "Processed", "steps": ["reserve", "charge", "ship", "capture"] * 5}
    instance = _finished_instance(output)

    assert instance.fields_are_packed
    held = _reachable(instance)
    assert not any(isinstance(o, dict) and o for o in held)  # neither the output nor the custom status as objects
    assert not any(isinstance(o, str) and o.startswith('{"orderId"') for o in held)  # nor the input text
    assert instance.output == output
    assert instance.custom_status == {"step": "ship", "attempt": 1}
    assert instance.input_json == '{"orderId": "o1", "lines": [1, 2, 3]}'


def test_a_packed_instance_can_still_be_changed():
    instance = _finished_instance("terminated by the operator")
    instance.custom_status = "changed"
    assert not instance.fields_are_packed
    assert instance.custom_status == "changed"
    assert instance.output == "terminated by the operator"
    assert instance.input_json == '{"orderId": "o1", "lines": [1, 2, 3]}'


def _history(order: str) -> list[ev.HistoryEvent]:
    events = [ev.orchestrator_started(T0), ev.execution_started(T0, "order_orchestrator", f'{{"orderId": "{order}"}}')]
    for task, step in enumerate(("reserve-inventory", "charge-payment", "ship-order", "capture-payment")):
        events.append(ev.task_scheduled(T0, task, "begin_step", f'{{"orderId": "{order}", "step": "{step}"}}'))
        events.append(ev.task_completed(T0 + timedelta(seconds=task), task, f'{{"ok": true, "step": "{step}"}}'))
    events.append(ev.orchestrator_completed(T0 + timedelta(seconds=9)))
    return events


def test_finished_histories_are_packed_with_a_dictionary_learned_from_the_first_ones(monkeypatch):
    # the dictionary is learned once per process: a fresh one here, as a simulation's process has
    monkeypatch.setattr(instance_module, "_DICTIONARY", LearnedDictionary(HISTORIES_LEARN_FROM))
    packed: list[Instance] = []
    for n in range(HISTORIES_LEARN_FROM + 2):
        instance = Instance(f"o{n}:1", "".join(["order_", "orchestrator"]), 1, None, T0, T0)
        instance.append_history(_history(f"o{n}"))
        instance.status = OrchestrationRuntimeStatus.Completed
        instance.pack_history()
        packed.append(instance)
    last = packed[-1]
    assert last.history == _history(f"o{len(packed) - 1}")  # equal events back
    assert all(i.history == _history(f"o{n}") for n, i in enumerate(packed))
    plain = len(zlib.compress(pickle.dumps(_history("o9"), protocol=pickle.HIGHEST_PROTOCOL)))
    assert len(last._packed_history or b"") < plain * 0.6  # the dictionary pays (zlib alone: ~3x bigger on real runs)
    assert last.name is packed[0].name  # the orchestrator's name held once


def _status_body(n: int) -> str:
    return (
        f'{{"type": "StatusUpdate", "schemaVersion": 1, "orderId": "ord-{n:05d}", "status": "Completed", '
        f'"attempt": 1, "at": "2026-01-01T08:{n % 60:02d}:00+00:00", "reason": null}}'
    )


def test_messages_on_a_queue_nothing_received_from_are_packed_and_read_back_equal(monkeypatch):
    # the dictionary is learned once per process: a fresh one here, as a simulation's process has
    monkeypatch.setattr(broker_module, "_UNREAD_BODIES", LearnedDictionary(16))
    broker = InProcessBroker(ManualClock(T0))
    broker.declare_queue("statuses")
    broker.declare_queue("work")
    for n in range(40):
        order = "".join(["ord-", f"{n:05d}"])
        broker.send(
            "statuses", OutgoingMessage(_status_body(n), f"{order}:Completed:1", "StatusUpdate", correlation_id=order)
        )
    broker.send("work", OutgoingMessage("{}", "w0"))
    assert broker.receive("work") is not None
    broker.send("work", OutgoingMessage('{"n": 1}', "w1", application_properties={"k": "v"}))

    statuses = broker.contents("statuses")
    assert [str(m) for m in statuses] == [_status_body(n) for n in range(40)]
    assert statuses[7].correlation_id == "ord-00007" and statuses[7].application_properties == {}
    stored = list(broker._queue("statuses").messages.values())
    assert all(rec.packed for rec in stored)
    assert sum(len(rec.stored_body) for rec in stored[20:]) < 0.5 * sum(len(rec.body) for rec in stored[20:])
    assert stored[3].correlation_id is sys.intern("ord-00003")  # an order's id held once
    # a queue something receives from keeps its new messages as they came
    (later,) = [rec for rec in broker._queue("work").messages.values() if rec.message_id == "w1"]
    assert not later.packed and later.body == b'{"n": 1}'
    received = broker.receive("work")
    assert received is not None and str(received) == '{"n": 1}' and received.application_properties == {"k": "v"}


def test_finished_instances_share_one_closed_empty_inbox_and_timer_table():
    first, second = _finished_instance("done"), _finished_instance("done too")
    assert first.inbox is second.inbox and first.pending_timers is second.pending_timers
    assert first.scheduled is second.scheduled
    first.inbox.clear()  # what the engine does to a finished instance's inbox: harmless
    with pytest.raises(RuntimeError):
        first.inbox.append(ev.orchestrator_started(T0))
    with pytest.raises(RuntimeError):
        first.pending_timers[1] = T0
    assert second.inbox == [] and second.pending_timers == {}
