"""A flapping dependency pages once, not once per flap (``OUTAGE_SETTLE_SECONDS``, domain/circuit.py,
supervisor/outage.py): ``DependencyRecovered`` goes out only once the circuit has stayed closed for the
settling period; a reopening sooner continues the outage already paged (no new ``DependencyOutage``), and
the one recovery covers the whole span, from its first opening to its last closing, with the number of
reopenings. A reopening later is a new outage; with the setting 0, each closing and reopening is a pair, as
before. Exactly once still holds: two supervisors racing, a send or a marker write that fails, a recovery
decided while another supervisor took a reopening in, an older writer dropping the new fields. The
supervisor's runs against the Cosmos protocol server, the clock moved by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.health_store import CosmosHealthStore, read_health, update_health
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.circuit import (
    CONTINUED,
    OUTAGE_ALERT,
    RECOVERY_ALERT,
    SETTLED,
    DependencyHealth,
    OutageAlert,
    mark_alerted,
    outage_alerts_due,
)
from domain.timefmt import to_text
from settings import Settings
from supervisor.outage import alert_outages
from tests.circuit.support import SlowHealthStore, closed, opened
from tests.circuit.test_outage_alerts import _LosingResponse, _LostSend
from tests.contexts import context_with
from tests.fakes import RecordingSender

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTLE = timedelta(seconds=300)
PERIOD = timedelta(seconds=30)  # the supervisor's


def kinds(due: list[Any]) -> list[tuple[str, datetime]]:
    return [(a.kind, a.started) for a in due]


def marked(health: DependencyHealth, due: list[Any]) -> DependencyHealth:
    for alert in due:
        health, changed = mark_alerted(health, alert)
        assert changed
    return health


# --- the pure rules ------------------------------------------------------------------------------


def paged(dependency: str) -> DependencyHealth:
    """A circuit opened at T0 and its outage paged."""
    health = opened(DependencyHealth.fresh(dependency, T0), T0)
    return marked(health, outage_alerts_due(health))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_reopenings_unseen_between_two_runs_continue_the_outage_when_sooner_than_the_settling_period() -> None:
    health = paged("shipping")
    # between two runs: closed at 40 s, reopened at 50 s, closed at 90 s, reopened at 100 s
    for closing, reopening in ((40, 50), (90, 100)):
        health = opened(closed(health, at(closing)), at(reopening))
    now = T0 + timedelta(seconds=110)
    due = outage_alerts_due(health, now=now, settle=SETTLE)
    assert [(a.kind, a.started, a.last_opening) for a in due] == [
        (CONTINUED, T0, T0 + timedelta(seconds=50)),
        (CONTINUED, T0, T0 + timedelta(seconds=100)),
    ]
    health = marked(health, due)
    assert (health.outage_alerted_for, health.outage_continued_to, health.outage_reopenings) == (
        T0,
        T0 + timedelta(seconds=100),
        2,
    )
    last_close = T0 + timedelta(seconds=140)
    health = closed(health, last_close)
    assert outage_alerts_due(health, now=last_close + SETTLE - timedelta(seconds=1), settle=SETTLE) == []
    settled, recovery = outage_alerts_due(health, now=last_close + SETTLE, settle=SETTLE)
    assert (settled.kind, settled.started) == (SETTLED, T0)  # recorded before the recovery is sent
    assert (recovery.kind, recovery.started, recovery.closed, recovery.reopenings) == (
        RECOVERY_ALERT,
        T0,
        last_close,
        2,
    )
    assert recovery.outage_seconds == 140.0  # first opening to last closing
    assert outage_alerts_due(marked(health, [settled, recovery]), now=last_close + SETTLE, settle=SETTLE) == []


def test_a_reopening_later_than_the_settling_period_is_a_new_outage_even_when_no_run_saw_the_closing() -> None:
    health = paged("payment")
    closed_at = T0 + timedelta(seconds=60)
    reopened = closed_at + SETTLE + timedelta(seconds=1)
    health = opened(closed(health, closed_at), reopened)  # the supervisor did not run meanwhile
    due = outage_alerts_due(health, now=reopened + timedelta(seconds=5), settle=SETTLE)
    assert kinds(due) == [(RECOVERY_ALERT, T0), (OUTAGE_ALERT, reopened)]
    assert due[0].closed == closed_at and due[0].reopenings == 0


def test_an_unseen_outage_longer_after_the_last_opening_paged_than_the_settling_period_is_paged_as_before() -> None:
    """The closing between them is not recorded: a gap that may have been longer than the settling period is
    taken for one (a page too many rather than an outage hidden)."""
    health = paged("payment")
    later = T0 + SETTLE + timedelta(minutes=5)
    health = opened(closed(health, later - timedelta(seconds=5)), later)
    health = opened(closed(health, later + timedelta(seconds=40)), later + timedelta(seconds=50))
    due = outage_alerts_due(health, now=later + timedelta(seconds=60), settle=SETTLE)
    # the reopening after the one paged anew is sooner than the settling period: taken into it
    assert [(a.kind, a.started, a.last_opening) for a in due] == [
        (RECOVERY_ALERT, T0, T0),
        (OUTAGE_ALERT, later, later),
        (CONTINUED, later, later + timedelta(seconds=50)),
    ]
    assert due[0].closed is None  # closed at a moment no longer recorded


def test_with_no_settling_period_every_closing_is_due_at_once_and_every_reopening_is_paged() -> None:
    health = closed(paged("shipping"), at(40))
    assert kinds(outage_alerts_due(health, now=T0 + timedelta(seconds=41))) == [(RECOVERY_ALERT, T0)]
    health = opened(health, T0 + timedelta(seconds=50))
    assert kinds(outage_alerts_due(health, now=T0 + timedelta(seconds=51))) == [
        (RECOVERY_ALERT, T0),
        (OUTAGE_ALERT, T0 + timedelta(seconds=50)),
    ]


def test_a_continued_outage_long_closed_still_gets_its_recovery_and_unpaged_history_is_not_paged() -> None:
    health = closed(opened(closed(paged("shipping"), at(40)), at(60)), at(100))
    now = T0 + timedelta(hours=3)  # the supervisor paused for hours
    due = outage_alerts_due(health, now - timedelta(hours=1), now=now, settle=SETTLE)
    assert [(a.kind, a.started, a.reopenings) for a in due] == [
        (CONTINUED, T0, 0),
        (SETTLED, T0, 1),
        (RECOVERY_ALERT, T0, 1),
    ]
    history = opened(closed(opened(DependencyHealth.fresh("payment", T0), T0), at(40)), at(60))
    history = closed(history, at(100))  # never paged (the supervisor was down all along)
    assert outage_alerts_due(history, now - timedelta(hours=1), now=now, settle=SETTLE) == []


def test_a_recovery_recorded_over_a_reopening_taken_in_gives_the_reopening_back_to_be_paged() -> None:
    """A supervisor of the version before ``outageSettledFor`` (a rolling upgrade) sends the recovery without
    recording its decision first, while another takes a reopening in: recording that recovery gives the reopening
    back, and the next run pages it as a new outage (the operator was told it recovered)."""
    closed_at = at(40)
    health = closed(paged("inventory"), closed_at)
    recovery = OutageAlert(RECOVERY_ALERT, "inventory", T0, closed_at)  # as the older version decided it
    reopened = closed_at + SETTLE - timedelta(seconds=60)
    health = opened(health, reopened)
    health = marked(health, outage_alerts_due(health, now=reopened, settle=SETTLE))
    assert (health.outage_continued_to, health.outage_reopenings) == (reopened, 1)
    health, changed = mark_alerted(health, recovery)
    assert changed and (health.recovery_alerted_for, health.outage_continued_to) == (T0, None)
    assert kinds(outage_alerts_due(health, now=reopened + PERIOD, settle=SETTLE)) == [(OUTAGE_ALERT, reopened)]


# --- the supervisor's runs against Cosmos ---------------------------------------------------------


def with_settle(ctx: Any, seconds: int) -> Any:
    return context_with(ctx, settings=replace(ctx.settings, outage_settle=timedelta(seconds=seconds)))


def open_at(store: Any, dependency: str, at: datetime) -> None:
    update_health(store, dependency, lambda h: (opened(h, at), None), at)


def close_at(store: Any, dependency: str, at: datetime) -> None:
    update_health(store, dependency, lambda h: (closed(h, at), None), at)


def alerts(sender: RecordingSender) -> list[tuple[str, dict[str, Any]]]:
    return [(m.message_id, json.loads(m.body)) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]


def flapping(ctx: Any, store: Any, dependency: str, moves: list[tuple[int, str]], until: int) -> None:
    """The circuit of ``dependency`` opens and closes at ``moves`` (seconds from T0, the clock's start: "open" or
    "close"), the supervisor running every period from the clock's time until ``until`` seconds."""
    pending = sorted(moves)
    first = int((ctx.clock.now() - T0) / PERIOD)
    for tick in range(first * int(PERIOD.total_seconds()), until + 1, int(PERIOD.total_seconds())):
        while pending and pending[0][0] <= tick:
            seconds, move = pending.pop(0)
            (open_at if move == "open" else close_at)(store, dependency, at(seconds))
        ctx.clock.set(at(tick))
        alert_outages(ctx)


# open 40 s (a cool-down, then a probe that succeeds), closed 60 s, five times over: five reopenings
FLAPS = [(at, move) for k in range(6) for at, move in ((100 * k, "open"), (100 * k + 40, "close"))]
LAST_CLOSE = 540


@pytest.mark.cosmos
def test_a_service_flapping_within_the_settling_period_pages_one_outage_and_one_recovery(ctx, sender, health):
    start = ctx.clock.now()
    flapping(ctx, health, "shipping", FLAPS, until=LAST_CLOSE + 600)
    sent = alerts(sender)
    assert [body["kind"] for _id, body in sent] == [OUTAGE_ALERT, RECOVERY_ALERT]
    (outage_id, _outage), (recovery_id, recovery) = sent
    assert outage_id.endswith(f"shipping@{start.isoformat()}") and recovery_id.endswith(f"shipping@{start.isoformat()}")
    assert recovery["details"]["outageSeconds"] == LAST_CLOSE  # from the first opening to the last closing
    assert recovery["details"]["closedAt"] == to_text(start + timedelta(seconds=LAST_CLOSE))
    assert recovery["details"]["reopenings"] == 5
    assert "reopened 5 times" in recovery["summary"]
    sent_at = datetime.fromisoformat(recovery["at"])
    assert sent_at >= start + timedelta(seconds=LAST_CLOSE) + ctx.settings.outage_settle


@pytest.mark.cosmos
def test_a_reopening_after_the_settling_period_is_a_new_outage_with_its_own_pair(ctx, sender, health):
    start = ctx.clock.now()
    reopen = 40 + int(ctx.settings.outage_settle.total_seconds()) + 30
    moves = [(0, "open"), (40, "close"), (reopen, "open"), (reopen + 40, "close")]
    flapping(ctx, health, "payment", moves, until=reopen + 40 + 600)
    sent = alerts(sender)
    assert [body["kind"] for _id, body in sent] == [OUTAGE_ALERT, RECOVERY_ALERT, OUTAGE_ALERT, RECOVERY_ALERT]
    second = to_text(start + timedelta(seconds=reopen))
    assert [body["details"]["outageStartedAt"] for _id, body in sent] == [to_text(start)] * 2 + [second] * 2
    assert [body["details"]["reopenings"] for _id, body in sent[1::2]] == [0, 0]


@pytest.mark.cosmos
def test_with_the_setting_0_each_closing_and_reopening_is_a_pair_as_before(ctx, sender, health):
    ctx = with_settle(ctx, 0)
    flapping(ctx, health, "shipping", FLAPS, until=LAST_CLOSE + 60)
    assert [body["kind"] for _id, body in alerts(sender)] == [OUTAGE_ALERT, RECOVERY_ALERT] * 6


def test_the_setting_is_read_and_bounded() -> None:
    assert Settings.from_env({}).outage_settle == SETTLE
    assert Settings.from_env({}, OUTAGE_SETTLE_SECONDS="0").outage_settle == timedelta(0)
    for bad in ("-1", "3601", "x"):
        with pytest.raises(ValueError, match="OUTAGE_SETTLE_SECONDS"):
            Settings.from_env({}, OUTAGE_SETTLE_SECONDS=bad)


@pytest.mark.cosmos
def test_two_supervisors_taking_in_the_same_reopening_count_it_once(ctx, sender, health):
    slow = SlowHealthStore(health)
    other = replace(ctx, health=health)  # supervisor B: same stores, clock and queue
    ctx = context_with(ctx, health=slow)
    flapping(ctx, health, "shipping", [(0, "open"), (40, "close")], until=60)
    open_at(health, "shipping", ctx.clock.now() + timedelta(seconds=10))
    ctx.clock.advance(PERIOD)

    def supervisor_b() -> None:
        alert_outages(other)

    slow.during_next_save = supervisor_b  # B takes it in while A's mark is on its way
    alert_outages(ctx)
    doc = read_health(health, "shipping", ctx.clock.now())
    assert doc.outage_reopenings == 1
    close_at(health, "shipping", ctx.clock.now())
    ctx.clock.advance(ctx.settings.outage_settle)
    alert_outages(ctx)
    alert_outages(other)
    sent = alerts(sender)
    assert [body["kind"] for _id, body in sent] == [OUTAGE_ALERT, RECOVERY_ALERT]
    assert sent[1][1]["details"]["reopenings"] == 1


class _ReopenedDuringSend(RecordingSender):
    """Supervisor A's sender: during its first send of a recovery, the circuit reopens (by an agent's clock
    sooner than the settling period after the closing: A's clock runs ahead) and supervisor B takes the
    reopening into the outage before A records the recovery."""

    def __init__(self, inner: RecordingSender, reopen: Any) -> None:
        super().__init__()
        self.inner = inner
        self.reopen = reopen

    def send(self, queue: str, message: OutgoingMessage) -> None:
        self.inner.send(queue, message)
        if RECOVERY_ALERT in message.message_id and self.reopen is not None:
            reopen, self.reopen = self.reopen, None
            reopen()


@pytest.mark.cosmos
def test_a_reopening_while_another_supervisor_sends_the_recovery_is_paged_after_it(ctx, sender, health):
    """A records the recovery decided (``SETTLED``) before it sends it: B, its clock behind, sees the reopening sooner
    than the settling period by the agents' clocks but does not take it into the outage A may have told the operator
    is over (before, it did, and A's recovery marker gave it back): B sends the recovery (the same MessageId, one
    kept) and pages the reopening."""
    start = ctx.clock.now()
    flapping(ctx, health, "inventory", [(0, "open"), (40, "close")], until=60)
    closed_at = start + timedelta(seconds=40)
    reopened = closed_at + ctx.settings.outage_settle - timedelta(seconds=60)
    other = replace(ctx, clock=ManualClock(reopened + timedelta(seconds=1)))  # B's clock: behind A's

    def reopen() -> None:
        open_at(health, "inventory", reopened)
        alert_outages(other)  # B: a reopening sooner than the settling period, after the recovery was decided

    ctx = context_with(ctx, sender=_ReopenedDuringSend(sender, reopen))
    ctx.clock.set(closed_at + ctx.settings.outage_settle)  # A: closed long enough
    alert_outages(ctx)
    assert read_health(health, "inventory", ctx.clock.now()).outage_continued_to is None  # never taken in
    ctx.clock.advance(PERIOD)
    alert_outages(ctx)
    sent = [(body["kind"], body["details"]["outageStartedAt"]) for _id, body in alerts(sender)]
    assert list(dict.fromkeys(sent)) == [  # B's resend of the recovery under the same MessageId: dropped
        (OUTAGE_ALERT, to_text(start)),
        (RECOVERY_ALERT, to_text(start)),
        (OUTAGE_ALERT, to_text(reopened)),  # the service is down again: the operator hears it
    ]


class _SlowRead(SlowHealthStore):
    """``during_read`` runs once, after a read of ``dependency``'s document has fetched it and before it returns."""

    def __init__(self, inner: CosmosHealthStore, dependency: str) -> None:
        super().__init__(inner)
        self.dependency = dependency
        self.during_read: Any = None

    def get(self, dependency: str) -> DependencyHealth | None:
        if dependency == self.dependency:
            self.during_next_read, self.during_read = self.during_read, None
        return super().get(dependency)


@pytest.mark.cosmos
def test_a_recovery_decided_while_another_supervisor_takes_the_reopening_in_is_not_sent(ctx, sender, health):
    """A finds the circuit closed for the settling period (its clock ahead of the agents'); before it records that
    decision, the circuit reopens (sooner than the settling period by the agents' clocks) and B takes the reopening
    in. A's record is refused and A sends nothing: no recovery while the circuit is open, and the outage paged goes
    on (before, A sent the recovery anyway, and the reopening was paged again as a new outage)."""
    start = ctx.clock.now()
    slow = _SlowRead(health, "shipping")
    other = replace(ctx, health=health)
    ctx = context_with(ctx, health=slow)
    flapping(ctx, health, "shipping", [(0, "open"), (40, "close")], until=60)
    closed_at = start + timedelta(seconds=40)
    reopened = closed_at + ctx.settings.outage_settle - timedelta(seconds=20)  # by the agent's clock

    def reopen() -> None:
        open_at(health, "shipping", reopened)
        alert_outages(replace(other, clock=ManualClock(reopened + timedelta(seconds=1))))  # B takes it in

    slow.during_read = reopen
    ctx.clock.set(closed_at + ctx.settings.outage_settle)  # A: closed long enough, by its clock
    assert alert_outages(ctx) == 0
    assert read_health(health, "shipping", ctx.clock.now()).outage_continued_to == reopened
    last_close = reopened + timedelta(seconds=40)
    close_at(health, "shipping", last_close)
    ctx.clock.set(last_close + ctx.settings.outage_settle)
    alert_outages(ctx)
    sent = alerts(sender)
    assert [body["kind"] for _id, body in sent] == [OUTAGE_ALERT, RECOVERY_ALERT]
    assert sent[1][1]["details"]["reopenings"] == 1
    assert sent[1][1]["details"]["outageSeconds"] == (last_close - start).total_seconds()


@pytest.mark.cosmos
def test_the_recovery_of_a_flapping_outage_is_sent_again_after_a_lost_send_and_never_after_a_lost_mark(ctx, health):
    lossy = _LostSend()
    losing = _LosingResponse(health)
    ctx = context_with(ctx, sender=lossy, health=losing)
    flapping(ctx, health, "shipping", FLAPS, until=LAST_CLOSE + 30)
    assert [b["kind"] for _i, b in alerts(lossy)] == [OUTAGE_ALERT]
    ctx.clock.advance(ctx.settings.outage_settle)
    lossy.lost = 1
    assert alert_outages(ctx) == 0  # the send's outcome unknown: not marked
    ctx.clock.advance(PERIOD)
    losing.lose = 1
    assert alert_outages(ctx) == 0  # sent again; the mark's outcome unknown to this run
    ctx.clock.advance(timedelta(hours=2))  # well past any duplicate-detection window
    assert alert_outages(ctx) == 0
    recoveries = [(i, b) for i, b in alerts(lossy) if b["kind"] == RECOVERY_ALERT]
    assert len(recoveries) == 2 and len({i for i, _b in recoveries}) == 1  # the same MessageId: one kept
    assert {b["details"]["reopenings"] for _i, b in recoveries} == {5}


@pytest.mark.cosmos
def test_an_older_writer_dropping_the_new_fields_leaves_one_outage_its_reopening_taken_in_again(ctx, sender, health):
    start = ctx.clock.now()
    flapping(ctx, health, "payment", [(0, "open"), (40, "close"), (100, "open")], until=120)
    assert read_health(health, "payment", ctx.clock.now()).outage_continued_to == start + timedelta(seconds=100)
    # an agent of a version before the settling period writes the document without the fields it does not know
    update_health(
        health, "payment", lambda h: (replace(h, outage_continued_to=None, outage_reopenings=0), None), ctx.clock.now()
    )
    flapping(ctx, health, "payment", [(140, "close")], until=140 + 600)
    sent = alerts(sender)
    # the document still says when it closed and reopened: the next run takes the reopening in again
    assert [(body["kind"], body["details"]["outageStartedAt"]) for _id, body in sent] == [
        (OUTAGE_ALERT, to_text(start)),
        (RECOVERY_ALERT, to_text(start)),
    ]
    assert sent[1][1]["details"]["reopenings"] == 1 and sent[1][1]["details"]["outageSeconds"] == 140


class _FailingMarks:
    """A health store whose next ``fail`` saves are refused (nothing written): a marker write that fails."""

    def __init__(self, inner: CosmosHealthStore) -> None:
        self.inner = inner
        self.fail = 0

    def get(self, dependency: str) -> DependencyHealth | None:
        return self.inner.get(dependency)

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        if self.fail:
            self.fail -= 1
            raise StoreUnavailable("the marker write failed")
        return self.inner.save(doc)

    def count_waiting(self, reason: str) -> int:
        return self.inner.count_waiting(reason)


class _MarkFailsAfter(RecordingSender):
    """Delivers every alert; after its first of ``kind`` (``DependencyOutage``, ``DependencyRecovered``), the store's
    next write (its marker) fails."""

    def __init__(self, inner: RecordingSender, store: _FailingMarks, kind: str = RECOVERY_ALERT) -> None:
        super().__init__()
        self.inner = inner
        self.store: _FailingMarks | None = store
        self.kind = kind

    def send(self, queue: str, message: OutgoingMessage) -> None:
        self.inner.send(queue, message)
        if self.kind in message.message_id and self.store is not None:
            self.store.fail, self.store = 1, None


@pytest.mark.cosmos
def test_a_reopening_after_a_recovery_sent_and_not_recorded_is_paged_not_taken_in(ctx, sender, health):
    """The supervisor's clock runs ahead of the agents' (by 30 s): it finds the circuit closed for the settling period
    and sends the recovery, whose marker write fails. The circuit then reopens, 280 s after the closing by the agent's
    clock. The operator was told it recovered: the next run pages the reopening as a new outage, never takes it into
    the outage recovered (before, it did: no DependencyOutage, and its DependencyRecovered, under the MessageId
    already sent, was dropped by duplicate detection: the operator never heard the service was down again)."""
    start = ctx.clock.now()
    failing = _FailingMarks(health)
    ctx = context_with(ctx, health=failing, sender=_MarkFailsAfter(sender, failing))
    flapping(ctx, health, "payment", [(0, "open"), (40, "close")], until=60)
    closed_at = start + timedelta(seconds=40)
    ctx.clock.set(closed_at + ctx.settings.outage_settle)  # 30 s ahead of the agents' clock
    assert alert_outages(ctx) == 0  # the recovery sent, its marker write failed
    reopened = closed_at + ctx.settings.outage_settle - timedelta(seconds=20)  # by the agent's clock
    open_at(health, "payment", reopened)
    ctx.clock.advance(PERIOD)
    alert_outages(ctx)
    sent = [(body["kind"], body["details"]["outageStartedAt"]) for _id, body in alerts(sender)]
    assert list(dict.fromkeys(sent)) == [  # a resend under the same MessageId is dropped by duplicate detection
        (OUTAGE_ALERT, to_text(start)),
        (RECOVERY_ALERT, to_text(start)),
        (OUTAGE_ALERT, to_text(reopened)),  # the service is down again: the operator hears it
    ]
    doc = read_health(health, "payment", ctx.clock.now())
    assert (doc.outage_alerted_for, doc.outage_continued_to, doc.outage_reopenings) == (reopened, None, 0)
