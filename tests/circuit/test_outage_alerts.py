"""One operator alert per outage, not per order (supervisor/outage.py): a DependencyOutage when a
circuit opens and a DependencyRecovered when it closes, exactly one of each per outage with two
supervisors racing, a lost response on the marker write, a lost response on the send, and runs after
the duplicate-detection window; against the Cosmos protocol server."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.health_store import CosmosHealthStore, read_health, update_health
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import transitions
from domain.circuit import (
    OUTAGE_ALERT,
    RECOVERY_ALERT,
    CircuitState,
    DependencyHealth,
    admit,
    mark_alerted,
    outage_alerts_due,
    record_failure,
    record_success,
    waiting_reason,
)
from supervisor.outage import alert_outages
from tests.circuit.support import POLICY, opened
from tests.contexts import context_with
from tests.deadlines import JUST_PAST, just_past
from tests.fakes import RecordingSender

# --- the pure rules (domain/circuit.py) ---------------------------------------------------------


def test_an_outage_is_due_once_open_and_once_closed_and_a_failed_probe_is_not_a_new_outage(clock):
    t0 = clock.now()
    health = opened(DependencyHealth.fresh("shipping", t0), t0)
    due = outage_alerts_due(health)
    assert [(a.kind, a.started) for a in due] == [(OUTAGE_ALERT, t0)]
    health, changed = mark_alerted(health, due[0])
    assert changed and outage_alerts_due(health) == []
    assert mark_alerted(health, due[0]) == (health, False)  # a second mark changes nothing
    # a probe that fails reopens the same outage: nothing new to alert
    probing = admit(health, t0 + just_past(POLICY.cooldown), POLICY).health
    health, _t = record_failure(probing, t0 + just_past(POLICY.cooldown) + JUST_PAST, POLICY)
    assert health.state is CircuitState.OPEN and outage_alerts_due(health) == []
    # the circuit closes: one recovery, with the outage's length
    closed_at = t0 + timedelta(seconds=200)
    health, _t = record_success(admit(health, closed_at, POLICY).health, closed_at)
    due = outage_alerts_due(health)
    assert [(a.kind, a.started, a.outage_seconds) for a in due] == [(RECOVERY_ALERT, t0, 200.0)]
    health, _changed = mark_alerted(health, due[0])
    assert outage_alerts_due(health) == []
    # the next outage is a new one
    t1 = closed_at + timedelta(minutes=5)
    health = opened(health, t1)
    assert [(a.kind, a.started) for a in outage_alerts_due(health)] == [(OUTAGE_ALERT, t1)]


def test_an_outage_that_opened_and_closed_between_two_runs_gets_both_alerts_in_order(clock):
    t0 = clock.now()
    health = opened(DependencyHealth.fresh("payment", t0), t0)
    health, _t = record_success(admit(health, t0 + timedelta(seconds=40), POLICY).health, t0 + timedelta(seconds=40))
    assert [a.kind for a in outage_alerts_due(health)] == [OUTAGE_ALERT, RECOVERY_ALERT]
    # marking the recovery also settles its opening: it is never sent after its recovery
    recovered = next(a for a in outage_alerts_due(health) if a.kind == RECOVERY_ALERT)
    health, _changed = mark_alerted(health, recovered)
    assert outage_alerts_due(health) == []


def test_agents_writing_the_health_keep_the_supervisors_markers(clock):
    t0 = clock.now()
    health = opened(DependencyHealth.fresh("shipping", t0), t0 - timedelta(seconds=5))
    before = health.updated_at
    health, _changed = mark_alerted(health, outage_alerts_due(health)[0])
    assert health.updated_at == before  # marking leaves updatedAt (it times probe grants) alone
    probing = admit(health, t0 + just_past(POLICY.cooldown), POLICY).health
    closed, _t = record_success(probing, t0 + just_past(POLICY.cooldown) + JUST_PAST)
    assert closed.outage_alerted_for == t0 - timedelta(seconds=5)
    assert [a.kind for a in outage_alerts_due(closed)] == [RECOVERY_ALERT]


# --- the supervisor's sends against Cosmos (supervisor/outage.py) -------------------------------


def open_in_store(store: Any, dependency: str, now: Any) -> None:
    for _ in range(POLICY.threshold):
        update_health(store, dependency, lambda h: (record_failure(h, now, POLICY)[0], None), now)


def close_in_store(store: Any, dependency: str, now: Any) -> None:
    update_health(store, dependency, lambda h: (admit(h, now, POLICY).health, None), now)
    update_health(store, dependency, lambda h: (record_success(h, now)[0], None), now)


def alerts(sender: RecordingSender) -> list[tuple[str, dict[str, Any]]]:
    return [(m.message_id, json.loads(m.body)) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]


def waiting_order(ctx: Any, order_id: str, dependency: str) -> None:
    record = transitions.new_record(order_id, None, ctx.clock.now())
    ctx.states.create(replace(record, last_error=waiting_reason(dependency)))


@pytest.mark.cosmos
def test_one_outage_alert_with_the_waiting_orders_and_one_recovery_alert_however_many_runs(ctx, sender, clock):
    waiting_order(ctx, "o1", "shipping")
    waiting_order(ctx, "o2", "shipping")
    waiting_order(ctx, "o3", "payment")  # waits for another dependency: not counted
    opened_at = clock.now()
    open_in_store(ctx.health, "shipping", opened_at)
    for _ in range(3):
        alert_outages(ctx)
        clock.advance(timedelta(seconds=30))
    [(_id, outage)] = alerts(sender)
    assert outage["kind"] == "DependencyOutage" and outage["orderId"] is None
    assert outage["details"]["waitingOrders"] == 2 and outage["details"]["dependency"] == "shipping"
    assert "2 orders wait for it" in outage["summary"]
    clock.advance(timedelta(minutes=10))
    close_in_store(ctx.health, "shipping", clock.now())
    closed_at = clock.now()
    for _ in range(3):  # closed for less than OUTAGE_SETTLE_SECONDS: it may still reopen
        alert_outages(ctx)
        clock.advance(timedelta(seconds=30))
    assert [body["kind"] for _id, body in alerts(sender)] == ["DependencyOutage"]
    clock.set(closed_at + ctx.settings.outage_settle)
    for _ in range(3):
        alert_outages(ctx)
        clock.advance(timedelta(seconds=30))
    sent = alerts(sender)
    assert [body["kind"] for _id, body in sent] == ["DependencyOutage", "DependencyRecovered"]
    recovered = sent[1][1]
    assert recovered["details"]["outageSeconds"] == pytest.approx(690.0)
    assert recovered["details"]["waitingOrders"] == 2  # still waiting when it closed: they resume now
    assert len({i for i, _b in sent}) == 2  # distinct ids: two alerts, never collapsed into one


class _RacingSender(RecordingSender):
    """Supervisor A's sender: during A's first send, supervisor B runs a whole alert pass (it reads
    the health before A marked it, so it sends too)."""

    def __init__(self, inner: RecordingSender, other: Any) -> None:
        super().__init__()
        self.inner = inner
        self.other = other
        self.raced = False

    def send(self, queue: str, message: OutgoingMessage) -> None:
        self.inner.send(queue, message)
        if not self.raced:
            self.raced = True
            alert_outages(self.other)


@pytest.mark.cosmos
def test_two_supervisors_racing_send_the_same_message_id_and_mark_it_once(ctx, sender, clock, health):
    from dataclasses import replace

    other = replace(ctx)  # supervisor B: same stores, clock and queue
    ctx = context_with(ctx, sender=_RacingSender(sender, other))
    open_in_store(health, "shipping", clock.now())
    alert_outages(ctx)
    ids = [i for i, _b in alerts(sender)]
    assert len(ids) == 2 and len(set(ids)) == 1  # both sent, Service Bus duplicate detection keeps one
    assert read_health(health, "shipping", clock.now()).outage_alerted_for == clock.now()
    # after the duplicate-detection window neither sends again: the marker, not the window, decides
    clock.advance(timedelta(hours=2))
    alert_outages(ctx)
    alert_outages(other)
    assert len(alerts(sender)) == 2


class _LosingResponse:
    """A health store whose next ``lose`` saves, after ``skip`` more, commit and then lose their response."""

    def __init__(self, inner: CosmosHealthStore) -> None:
        self.inner = inner
        self.lose = 0
        self.skip = 0

    def get(self, dependency: str) -> DependencyHealth | None:
        return self.inner.get(dependency)

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        written = self.inner.save(doc)
        if self.lose and self.skip:
            self.skip -= 1
        elif self.lose:
            self.lose -= 1
            raise StoreUnavailable("response lost after the write committed")
        return written

    def count_waiting(self, reason: str) -> int:
        return self.inner.count_waiting(reason)


@pytest.mark.cosmos
def test_a_lost_response_on_the_marker_write_does_not_alert_twice(ctx, sender, clock, health):
    open_in_store(health, "shipping", clock.now())
    losing = _LosingResponse(health)
    ctx = context_with(ctx, health=losing)
    losing.skip, losing.lose = 1, 1  # the outage recorded as being paged, the page sent, then its marker write
    assert alert_outages(ctx) == 0  # the mark's outcome is unknown to this run
    clock.advance(timedelta(hours=1))  # well past any duplicate-detection window
    assert alert_outages(ctx) == 0
    assert len(alerts(sender)) == 1


class _LostSend(RecordingSender):
    """Delivers the next ``lost`` sends and then raises, as a send whose response was lost."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def send(self, queue: str, message: OutgoingMessage) -> None:
        super().send(queue, message)
        if self.lost:
            self.lost -= 1
            raise SendError("response lost")


@pytest.mark.cosmos
def test_a_send_whose_response_was_lost_is_sent_again_with_the_same_id_then_never(ctx, clock, health):
    lossy = _LostSend()
    ctx = context_with(ctx, sender=lossy)
    open_in_store(health, "payment", clock.now())
    lossy.lost = 1
    assert alert_outages(ctx) == 0  # not marked: the next run sends again
    assert read_health(health, "payment", clock.now()).outage_alerted_for is None
    clock.advance(timedelta(seconds=30))
    assert alert_outages(ctx) == 1
    ids = [i for i, _b in alerts(lossy)]
    assert len(ids) == 2 and len(set(ids)) == 1  # the resend collapses in duplicate detection
    clock.advance(timedelta(hours=1))
    assert alert_outages(ctx) == 0


@pytest.mark.cosmos
def test_a_failed_opening_alert_holds_back_its_recovery(ctx, clock, health):
    lossy = _LostSend()
    ctx = context_with(ctx, sender=lossy)
    open_in_store(health, "inventory", clock.now())
    clock.advance(timedelta(seconds=40))
    close_in_store(health, "inventory", clock.now())  # opened and closed between two runs
    lossy.lost = 1
    alert_outages(ctx)
    assert [b["kind"] for _i, b in alerts(lossy)] == ["DependencyOutage"]  # recovery not sent before it
    clock.advance(ctx.settings.outage_settle)  # and not before it stayed closed OUTAGE_SETTLE_SECONDS
    alert_outages(ctx)
    assert [b["kind"] for _i, b in alerts(lossy)] == ["DependencyOutage", "DependencyOutage", "DependencyRecovered"]
    alert_outages(ctx)
    assert len(alerts(lossy)) == 3
