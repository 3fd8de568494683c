"""Every time the supervisor writes for people and clients is ``domain.timefmt``'s one form (``...000000Z``): a
history entry's detail and ``lastError``, a log event's message and fields, an alert's summary and details. Before
session 63 some said ``datetime.isoformat()``'s ``+00:00`` (``notBefore``, ``waitingSince``, ``outageStartedAt``,
``owedSince``, an alert's ``at``, "retry not before ...") and some ``str()``'s ``2026-01-01 08:00:00+00:00``:
two forms of one value, which a client parsing RFC 3339 with ``Z`` or comparing texts trips on. An alert id built
from a time keeps the form it had (``isoformat``): changing it would page the same problem twice across an upgrade.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import update_once
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import timefmt, transitions
from domain.circuit import OUTAGE_ALERT
from domain.records import StateRecord
from domain.states import ProcessState
from submission.intake import handle_orders_message
from supervisor import owed
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.contexts import context_with
from tests.deadlines import just_past
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.submission.corpus import order
from tests.supervisor.conftest import claimed, reclaim
from tests.supervisor.test_outage_wait import STEP_TIMEOUT, health, open_circuit, shipping_in_flight, with_health

pytestmark = pytest.mark.cosmos
__all__ = ["health"]  # the fixture, used here

ONE_FORM = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
# Anything that reads as a moment: isoformat's (with or without a fraction, ``+00:00``) and str()'s (a space for T).
A_MOMENT = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
_LOG_RECORD_KEYS = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def other_forms(value: Any) -> list[str]:
    """The moments written in ``value`` (a text, or JSON's lists and objects of them) in any form but the one; an
    alert id (``alertId``) is left out: it keeps the form it was built with."""
    if isinstance(value, str):
        return [m for m in A_MOMENT.findall(value) if not ONE_FORM.fullmatch(m)]
    if isinstance(value, dict):
        return [found for k, v in value.items() if k != "alertId" for found in other_forms(v)]
    if isinstance(value, list | tuple):
        return [found for v in value for found in other_forms(v)]
    return []


def app_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What the app logged (the Azure SDK's own request logs left out)."""
    return [r for r in caplog.records if not r.name.startswith(("azure", "urllib3"))]


def logged(record: logging.LogRecord) -> dict[str, Any]:
    """A log record as it is exported: its message and its ``extra`` fields."""
    extra = {k: v for k, v in record.__dict__.items() if k not in _LOG_RECORD_KEYS}
    return {"message": record.getMessage(), **extra}


def alerts(sender: RecordingSender) -> list[tuple[str, dict[str, Any]]]:
    return [(m.message_id, json.loads(m.body)) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]


@dataclass(frozen=True)
class Written:
    """What two supervisor runs wrote: the records, the app's log events, the alerts (id, body)."""

    waiting: StateRecord
    failed: StateRecord
    events: list[dict[str, Any]]
    alerts: list[tuple[str, dict[str, Any]]]


@pytest.fixture
def written(make_ctx, health, states, clock, sender, caplog) -> Written:
    """One order waits an outage out (``OutageWait``, ``SupervisorOutageWait``, the ``DependencyOutage`` alert);
    another misses its step deadline twice (``RetryScheduled``, ``SupervisorRecovered``, then ``Escalated`` and
    the ``RetriesExhausted`` alert)."""
    ctx = with_health(make_ctx, health, MAX_FAILURES="2")
    open_circuit(ctx)
    shipping_in_flight(states, clock, "o-wait")

    def begin(record: Any) -> Any:
        owner, now = str(record.locked_by), clock.now()
        return update_once(
            states,
            record,
            lambda r: transitions.begin_step(r, owner, "reserve", "inventory", f"{owner}:r", now + STEP_TIMEOUT, now),
        )

    begin(claimed(states, "o-retry", clock.now(), clock.now() + STEP_TIMEOUT))
    with caplog.at_level(logging.INFO):
        clock.advance(just_past(STEP_TIMEOUT))
        run_supervisor(ctx, ScanState())
        retried = states.get("o-retry")
        assert retried is not None and retried.process_state is ProcessState.PENDING and retried.complete_by
        clock.set(retried.complete_by)
        begin(reclaim(states, "o-retry", clock.now(), STEP_TIMEOUT))
        clock.advance(just_past(STEP_TIMEOUT))
        run_supervisor(ctx, ScanState())
    waiting, failed = states.get("o-wait"), states.get("o-retry")
    assert waiting is not None and failed is not None and failed.process_state is ProcessState.ERROR
    return Written(waiting, failed, [logged(r) for r in app_records(caplog)], alerts(sender))


def test_history_details_and_last_errors_are_in_the_one_form(written: Written) -> None:
    for record in (written.waiting, written.failed):
        texts = [record.last_error, *(entry.detail for entry in record.history)]
        assert other_forms(texts) == [], record.history
    details = {entry.event: entry.detail for entry in [*written.waiting.history, *written.failed.history]}
    assert ONE_FORM.search(details["StepStarted"]), details  # "reserve via inventory, deadline ..."
    assert ONE_FORM.search(details["OutageWait"]), details  # "...; retry not before ..."


def test_log_messages_and_fields_are_in_the_one_form(written: Written) -> None:
    events = written.events
    assert [(e["message"], found) for e in events if (found := other_forms(e))] == []
    [wait] = [e for e in events if e.get("event") == "SupervisorOutageWait"]
    assert ONE_FORM.fullmatch(wait["notBefore"]) and ONE_FORM.fullmatch(wait["waitingSince"]), wait
    assert written.waiting.complete_by is not None
    assert f"retry not before {timefmt.to_text(written.waiting.complete_by)}" in wait["message"], wait
    [recovered] = [e for e in events if e.get("event") == "SupervisorRecovered"]
    assert ONE_FORM.fullmatch(recovered["notBefore"]) and ONE_FORM.search(recovered["message"]), recovered
    assert any(ONE_FORM.fullmatch(e.get("completeBy") or "") for e in events if e.get("event") == "StateTransition")


def test_alert_summaries_and_details_are_in_the_one_form_and_ids_as_before(written: Written) -> None:
    sent = written.alerts
    assert [(body["kind"], found) for _id, body in sent if (found := other_forms(body))] == []
    [(outage_id, outage)] = [(i, body) for i, body in sent if body["kind"] == OUTAGE_ALERT]
    started = outage["details"]["outageStartedAt"]
    assert ONE_FORM.fullmatch(started) and f"circuit open since {started}" in outage["summary"], outage
    # its id keeps isoformat's form: the same outage paged by the release before keeps its MessageId
    assert outage_id.endswith(f"@{timefmt.parse(started).isoformat()}"), outage_id
    [exhausted] = [body for _id, body in sent if body["kind"] == "RetriesExhausted"]
    assert ONE_FORM.fullmatch(exhausted["details"]["at"]) and ONE_FORM.fullmatch(exhausted["at"]), exhausted


def test_the_stuck_alert_says_since_when_in_the_one_form_and_keeps_its_id(app_context, monkeypatch, caplog):
    """An owed alert that cannot be built (``supervisor.owed._summary`` raising) is alerted ``NotificationsStuck``:
    its summary's and ``owedSince``'s time in the one form, its id's as the release before built it."""
    sender = RecordingSender()
    ctx = context_with(app_context, sender=sender, settings=replace(app_context.settings, max_failures=1))
    body = json.dumps(order(orderId="o-stuck")).encode()
    handle_orders_message(ctx, FakeReceivedMessage.of(body, message_id="o-stuck"))
    summary = owed._summary

    def broken(record: Any, kind: str) -> str:
        if record.order_id == "o-stuck":
            raise RuntimeError("the alert of o-stuck cannot be built")
        return summary(record, kind)

    monkeypatch.setattr(owed, "_summary", broken)
    assert isinstance(ctx.clock, ManualClock)
    ctx.clock.advance(ctx.settings.start_grace + timedelta(seconds=1))
    with caplog.at_level(logging.INFO):
        run_supervisor(ctx, ScanState())  # escalates: its alert owed, and never built
        record = ctx.states.get("o-stuck")
        assert record is not None and record.process_state is ProcessState.ERROR and record.complete_by is not None
        while not [b for _i, b in alerts(sender) if b["kind"] == "NotificationsStuck"]:
            assert ctx.clock.now() < record.complete_by + timedelta(hours=1), "no NotificationsStuck alert"
            ctx.clock.advance(timedelta(minutes=2))
            run_supervisor(ctx, ScanState())

    [(stuck_id, stuck)] = [(i, b) for i, b in alerts(sender) if b["kind"] == "NotificationsStuck"]
    since = timefmt.to_text(record.complete_by)
    assert stuck["details"]["owedSince"] == since and f"delivered since {since} " in stuck["summary"], stuck
    assert f":{record.complete_by.isoformat()}:" in stuck_id, stuck_id  # the id as the release before built it
    assert [(r.getMessage(), found) for r in app_records(caplog) if (found := other_forms(logged(r)))] == []
