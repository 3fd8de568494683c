"""Do the log search alert rules (infra/modules/alerts.bicep) page an operator exactly when they must? Each rule is
run as Azure Monitor runs it (``tests/infra/log_alerts.py``: its own query, frequency, window, dimensions and
statefulness) on the rows Application Insights stores for the app's own records (``tests/observability/exported.py``:
the real OpenTelemetry handler and the real exporter's conversion).

Red team (rt-alert-rules): a log search rule is stateful unless ``autoMitigate`` is false, and one without
dimensions is one alert: once it fired, nothing it sees pages again until it has been quiet for three evaluations
(two for 15 minutes). A second order failing five minutes after the first (ordersFailed), a second operator alert
given up (alertsUndelivered) or a second state document that does not map (supervisorFailing) while the first was
still fired paged nobody. And ordersFailed counted every ``StateTransition`` into ``Error`` or
``CompensationFailed``, the side notes of a failed order too (``NotificationsDelivered``, ``OwedAlertSent``,
``OwedStatusSent``: ``Error -> Error``): an order whose notifications went out at the next hour's window paged
again an hour after its failure."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import map_each
from adapters.servicebus.sender import OutgoingMessage, SendError
from domain import transitions
from notifications.alerts import alert_undelivered, build_alert
from observability.events import state_transition
from tests.infra.log_alerts import LogRule
from tests.observability.exported import Row, exported

Event = tuple[float, str, dict[str, str]]  # minute logged, table, Properties

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _failed(order_id: str) -> list[Row]:
    """The rows of an order's attempt failing (``fail_order``'s write: ``Processing -> Error``)."""
    claimed = transitions.claim(transitions.new_record(order_id, None, T0), T0, timedelta(0))
    assert claimed.locked_by is not None
    with exported() as rows:
        state_transition(claimed, transitions.fail(claimed, claimed.locked_by, "pay", "card refused", T0))
    return rows


def _undelivered(order_id: str | None, kind: str = "OrderFailed") -> list[Row]:
    alert = build_alert(kind, f"order {order_id} failed", T0, order_id, "error", 1, {})
    with exported() as rows:
        alert_undelivered(alert, "given up after the courier's last try")
    return rows


def _unmapped(order_id: str, broken: str = "processState") -> list[Row]:
    """The rows of a document whose ``broken`` field holds a value the mapper refuses (its id's own)."""
    doc = {"id": order_id, "orderId": order_id, "processState": "Processing", broken: f"nonsense-{order_id}"}
    with exported() as rows:
        map_each([doc], "expired")
    return rows


def _at(minute: float, rows: list[Row]) -> list[Event]:
    return [(minute, row.table, row.properties) for row in rows]


def test_the_rows_the_rules_count_are_app_traces_with_string_properties() -> None:
    """What the rules read is what the exporter writes: the table, the field names, string values, and the
    SeverityLevel of the levels the app logs them at (ERROR 3, WARNING 2)."""
    [failed] = [r for r in _failed("ord-a") if r.properties.get("event") == "StateTransition"]
    assert failed.table == "AppTraces" and failed.severity_level == 1
    assert {k: failed.properties[k] for k in ("orderId", "fromState", "toState", "attempt")} == {
        "orderId": "ord-a",
        "fromState": "Processing",
        "toState": "Error",
        "attempt": "1",
    }
    [undelivered] = [r for r in _undelivered("ord-a") if r.properties.get("event") == "AlertUndelivered"]
    assert (undelivered.table, undelivered.severity_level, undelivered.properties["alertKind"]) == (
        "AppTraces",
        3,
        "OrderFailed",
    )
    [no_order] = [r for r in _undelivered(None, "DependencyOutage") if r.properties.get("event") == "AlertUndelivered"]
    assert "orderId" not in no_order.properties  # a None is left out: Properties.orderId is empty
    [unmapped] = [r for r in _unmapped("ord-a") if r.properties.get("event") == "UnmappedDocument"]
    assert (unmapped.table, unmapped.severity_level, unmapped.properties["orderId"]) == ("AppTraces", 3, "ord-a")


def test_a_status_given_up_whose_alert_could_not_be_sent_says_what_the_alert_said() -> None:
    """The alertsUndelivered rule's description sends the operator to the events' alertKind, orderId and summary:
    the ``AlertSendFailed`` of a ``StatusUndelivered`` alert carries them too (before, no summary: the alert's text
    was nowhere)."""
    from notifications.status import give_up

    bus = _ServiceBus()
    with exported() as rows:
        give_up(
            bus,
            order_id="ord-a",
            status="Failed",
            attempt=2,
            variant=None,
            reply_to="replies",
            at=T0,
            error=SendError("the reply queue is full"),
        )
    [failed] = [r.properties for r in rows if r.properties.get("event") == "AlertSendFailed"]
    assert (failed["alertKind"], failed["orderId"]) == ("StatusUndelivered", "ord-a")
    assert "could not be sent to 'replies'" in failed.get("summary", "")
    assert LogRule.of("alertsUndelivered").pages(_at(1, rows), until=30) == [(15, ("StatusUndelivered", "ord-a"))]


def test_two_orders_failing_five_minutes_apart_page_twice() -> None:
    rule = LogRule.of("ordersFailed")
    pages = rule.pages(_at(1, _failed("ord-a")) + _at(6, _failed("ord-b")), until=60)
    assert len(pages) == 2, pages


def test_a_failure_whose_answer_was_lost_and_later_read_back_pages_once() -> None:
    """``StateWriteUnconfirmed`` (the answer lost), then the same move's ``StateTransition`` when a later read-back
    finds it landed, six minutes on: one failure, one page."""
    from adapters.cosmos.errors import StoreOutcomeUnknown
    from adapters.cosmos.state_store import _unconfirmed

    claimed = transitions.claim(transitions.new_record("ord-a", None, T0), T0, timedelta(0))
    assert claimed.locked_by is not None
    failed = transitions.fail(claimed, claimed.locked_by, "pay", "card refused", T0)
    with exported() as lost:
        _unconfirmed(claimed, failed, StoreOutcomeUnknown("the connection was reset"))
    with exported() as found:
        state_transition(claimed, failed)
    assert [r.properties["event"] for r in lost] == ["StateWriteUnconfirmed"]
    assert len(LogRule.of("ordersFailed").pages(_at(1, lost) + _at(7, found), until=60)) == 1


def test_an_order_failing_again_minutes_after_an_operator_acted_pages_again() -> None:
    """Resubmitted, its next attempt fails seven minutes later; or compensated, its compensation fails: each is a
    new failure the operator must hear of, while the first's alert is still fired."""
    from domain.states import ProcessState

    claimed = transitions.claim(transitions.new_record("ord-a", None, T0), T0, timedelta(0))
    assert claimed.locked_by is not None
    failed = transitions.fail(claimed, claimed.locked_by, "pay", "card refused", T0)
    again = transitions.claim(transitions.resubmit(failed, "op", "card updated", T0), T0, timedelta(0))
    assert again.locked_by is not None
    compensating = failed.with_changes(T0, "CompensationRequested", "op", process_state=ProcessState.COMPENSATING)
    with exported() as first:
        state_transition(claimed, failed)
    with exported() as second_attempt:
        state_transition(again, transitions.fail(again, again.locked_by, "pay", "card refused again", T0))
    with exported() as compensation:
        state_transition(failed, compensating)
        state_transition(
            compensating,
            compensating.with_changes(T0, "CompensationFailed", "x", process_state=ProcessState.COMPENSATION_FAILED),
        )
    rule = LogRule.of("ordersFailed")
    assert len(rule.pages(_at(1, first) + _at(8, second_attempt), until=60)) == 2
    assert len(rule.pages(_at(1, first) + _at(8, compensation), until=60)) == 2


def test_two_alerts_given_up_fifteen_minutes_apart_page_twice() -> None:
    rule = LogRule.of("alertsUndelivered")
    events = _at(1, _undelivered("ord-a")) + _at(16, _undelivered("ord-b"))
    assert len(rule.pages(events, until=120)) == 2
    outages = _at(1, _undelivered(None, "DependencyOutage")) + _at(16, _undelivered(None, "DependencyRecovered"))
    assert len(rule.pages(outages, until=120)) == 2  # two alerts of no order, two kinds


def test_a_second_document_that_does_not_map_pages_and_a_phase_failing_every_run_pages_once() -> None:
    """A second document broken another way pages while the first's alert is fired; documents broken the same way
    (a mass schema drift: 200 here, each its own id and value) are one alert, not one per document (each was its
    own orderId dimension: 200 alerts), and every one of them is still logged with its id."""
    rule = LogRule.of("supervisorFailing")
    # each supervisor run (every 30 s) logs the document again while it does not map
    a, b = _unmapped("ord-a"), _unmapped("ord-b", "attempt")
    first = [e for i in range(120) for e in _at(1 + i / 2, a)]
    second = [e for i in range(60) for e in _at(16 + i / 2, b)]
    assert len(rule.pages(first + second, until=180)) == 2
    drift = [_unmapped(f"ord-{n}") for n in range(200)]
    every_run = [e for i in range(60) for rows in drift for e in _at(1 + i / 2, rows)]
    assert len(rule.pages(every_run, until=120)) == 1
    assert {e[2]["orderId"] for e in every_run} == {f"ord-{n}" for n in range(200)}
    with exported() as rows:
        from supervisor.run import _isolated

        def scan() -> int:
            raise RuntimeError("the scan failed")

        _isolated("scan", scan)
    every_run = [e for i in range(120) for e in _at(1 + i / 2, rows)]
    assert len(rule.pages(every_run, until=180)) == 1


class _ServiceBus:
    """A sender whose every send fails while ``down`` (Service Bus unavailable), else records it."""

    def __init__(self) -> None:
        self.down = True
        self.sent: list[tuple[str, OutgoingMessage]] = []

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if self.down:
            raise SendError("Service Bus unavailable")
        self.sent.append((queue, message))


@pytest.fixture
def sender() -> _ServiceBus:
    """The app context's sender (``tests/conftest.py``: ``app_context`` takes it)."""
    return _ServiceBus()


@pytest.mark.cosmos
def test_an_order_whose_notifications_go_out_an_hour_later_pages_once(
    app_context: Any, clock: Any, sender: _ServiceBus
) -> None:
    """The supervisor escalates an order while Service Bus is down: its alert and status are owed and go out in
    the next hour's window, acknowledged by an ``Error -> Error`` write (``NotificationsDelivered``). One failure,
    one page."""
    from dataclasses import replace

    from supervisor.run import run_supervisor
    from supervisor.scan import ScanState

    bus = sender
    record = transitions.claim(transitions.new_record("ord-a", None, clock.now()), clock.now(), timedelta(0))
    app_context.states.create(replace(record, failure_count=2))
    clock.advance(timedelta(seconds=1))
    with exported() as escalated:
        run_supervisor(app_context, ScanState())
    assert app_context.states.get("ord-a").process_state.value == "Error"
    clock.advance(timedelta(minutes=61))
    bus.down = False
    with exported() as delivered:
        run_supervisor(app_context, ScanState())
    assert bus.sent, "the owed notifications went out in the next hour's window"
    acknowledged = [r for r in delivered if r.properties.get("transition") == "NotificationsDelivered"]
    assert acknowledged and acknowledged[0].properties["toState"] == "Error"
    logging.getLogger(__name__).info("escalated %s rows, delivered %s rows", len(escalated), len(delivered))
    rule = LogRule.of("ordersFailed")
    assert len(rule.pages(_at(1, escalated) + _at(62, delivered), until=180)) == 1


def test_every_event_and_field_a_rule_reads_is_one_the_app_logs() -> None:
    """No rule waits for an event no code logs any more, or reads a field none logs."""
    from orchestrators.starter import START_EVENTS
    from tests.infra.paths import MODULES
    from tests.infra.test_operations_infra import emitted_fields
    from tests.test_docs import app_trees, emitted_event_names
    from tools.bicepcheck.query import load, resources

    events, fields = emitted_event_names(app_trees()), emitted_fields()
    events |= {name for pair in START_EVENTS.values() for name in pair}  # the starter logs them through this table
    rules = resources(load(MODULES / "alerts.bicep"), "Microsoft.Insights/scheduledQueryRules")
    assert len(rules) >= 7
    for symbol in (rule.symbol for rule in rules):
        [criterion] = LogRule.criteria(symbol)
        query = str(criterion["query"])
        named = set(re.findall(r'Properties\.event\)\s*(?:==|in)\s*\(?((?:\s*"\w+",?)+)', query))
        assert named, symbol
        assert {n for clause in named for n in re.findall(r'"(\w+)"', clause)} <= events, symbol
        assert set(re.findall(r"Properties\.(\w+)", query)) <= fields, symbol


def test_the_workbook_counts_moves_into_a_state_not_every_write() -> None:
    """The workbook's panels "Orders by state over time (transitions into each state)" and "Compensations and their
    outcomes" count ``StateTransition`` rows: one order claimed, its step begun (``Processing -> Processing``),
    failed, its notifications acknowledged (``Error -> Error``) moved into Processing once and into Error once."""
    from tests.infra.log_alerts import Query
    from tests.infra.paths import MODULES
    from tools.bicepcheck.query import load, variable

    claimed = transitions.claim(transitions.new_record("ord-a", None, T0), T0, timedelta(0))
    assert claimed.locked_by is not None
    begun = transitions.begin_step(claimed, claimed.locked_by, "payment", "payment", "req-1", T0, T0)
    failed = transitions.fail(begun, claimed.locked_by, "payment", "card refused", T0)
    delivered = failed.with_changes(T0, "NotificationsDelivered", "supervisor", complete_by=None)
    pending = transitions.new_record("ord-a", None, T0)
    with exported() as rows:
        for before, after in (
            (None, pending),
            (pending, claimed),
            (claimed, begun),
            (begun, failed),
            (failed, delivered),
        ):
            state_transition(before, after)
    workbook = load(MODULES / "workbook.bicep")
    by_state = Query.parse(str(variable(workbook, "ordersByState")), rows_only=True)
    into = [row["toState"] for row in by_state.run("AppTraces", [r.properties for r in rows])]
    assert sorted(into) == ["Error", "Pending", "Processing"]
    from domain.states import ProcessState

    compensating = failed.with_changes(T0, "CompensationRequested", "op", process_state=ProcessState.COMPENSATING)
    undone = compensating.with_changes(T0, "UndoStarted", "c")
    given_up = undone.with_changes(T0, "CompensationFailed", "c", process_state=ProcessState.COMPENSATION_FAILED)
    noted = given_up.with_changes(T0, "NotificationsDelivered", "supervisor")
    with exported() as rows:
        for before, after in ((failed, compensating), (compensating, undone), (undone, given_up), (given_up, noted)):
            state_transition(before, after)
    outcomes = Query.parse(str(variable(workbook, "compensations")), rows_only=True)
    kept = outcomes.run("AppTraces", [r.properties for r in rows])
    assert sorted(row["transition"] for row in kept) == ["CompensationFailed", "CompensationRequested"]


class _Orchestration:
    """The part of an orchestration's context ``last_try_lost`` reads: running past that point for the first time."""

    is_replaying = False

    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id


def test_a_status_and_an_alert_whose_last_try_died_on_every_repeat_page_each() -> None:
    """``LastTryLost``, logged by the orchestration whose last try and its repeats failed without running their
    give-up (``orchestrators.status.last_try_lost``): nothing else was logged or alerted for them, so the
    alertsUndelivered rule pages on it, one alert per lost alert's kind and order."""
    from orchestrators.status import last_try_lost

    lost = {
        "ord-a:1": ("publish_status", {"status": "Completed", "attempt": 1, "alertKind": "StatusUndelivered"}),
        "alert:OrderRejected:ord-b:1": ("send_alert", {"alertKind": "OrderRejected"}),
    }
    rows: dict[str, list[Row]] = {}
    for instance, (activity, fields) in lost.items():
        with exported() as rows[instance]:
            order = instance.split(":")[-2] if activity == "send_alert" else instance.split(":")[0]
            last_try_lost(_Orchestration(instance), activity, "lost", orderId=order, **fields)  # type: ignore[arg-type]
    status, alert = rows["ord-a:1"], rows["alert:OrderRejected:ord-b:1"]
    [row] = [r for r in status if r.properties.get("event") == "LastTryLost"]
    assert (row.severity_level, row.properties["instanceId"]) == (3, "ord-a:1")
    pages = LogRule.of("alertsUndelivered").pages(_at(1, status) + _at(2, alert), until=30)
    assert sorted(key for _, key in pages) == [("OrderRejected", "ord-b"), ("StatusUndelivered", "ord-a")]
