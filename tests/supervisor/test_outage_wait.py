"""The supervisor waits an outage out (supervisor/outage.py) against the Cosmos protocol server: an
attempt that failed on an open dependency is not counted against MAX_FAILURES and comes back after
the next probe; a failure on a healthy dependency counts as before; MAX_OUTAGE_WAIT_MINUTES bounds
the wait, and the escalation says why; a compensation round stuck on an open dependency waits too."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.health_store import CosmosHealthStore, update_health
from adapters.cosmos.state_store import update_once
from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from domain import transitions
from domain.circuit import CircuitState, DependencyHealth, record_failure, record_in_progress, record_success
from domain.compensation import claim_compensation, complete_step_logged, enter_compensation
from domain.states import ProcessState
from settings import Settings
from supervisor.compensation_rounds import claim_due_compensations
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.deadlines import just_past
from tests.supervisor.conftest import claimed, reclaim

pytestmark = pytest.mark.cosmos
STEP_TIMEOUT = Settings.from_env({}).step_timeout  # make_ctx builds its contexts over the defaults
OUTAGE_SETTINGS = {
    "MAX_FAILURES": "3",
    "CIRCUIT_FAILURE_THRESHOLD": "2",
    "CIRCUIT_COOLDOWN_SECONDS": "30",
    "CIRCUIT_COOLDOWN_MAX_SECONDS": "120",
}


@pytest.fixture
def health(cosmos_db):
    return CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER))


def with_health(make_ctx, health, **settings):
    return make_ctx(health=health, **{**OUTAGE_SETTINGS, **settings})


def open_circuit(ctx, dependency="shipping"):
    now = ctx.clock.now()
    policy = ctx.settings.circuit_policy
    for _ in range(policy.threshold):
        update_health(ctx.health, dependency, lambda h: (record_failure(h, now, policy)[0], None), now)


def shipping_in_flight(states, clock, order_id="o1"):
    """Attempt 1 began arrange-shipment via the shipping agent just now; its deadline is a minute away."""
    return _begin_shipping(states, clock, claimed(states, order_id, clock.now(), clock.now() + STEP_TIMEOUT))


def next_attempt_in_flight(states, clock, order_id="o1"):
    return _begin_shipping(states, clock, reclaim(states, order_id, clock.now(), STEP_TIMEOUT))


def _begin_shipping(states, clock, record):
    owner = record.locked_by
    assert owner is not None
    return update_once(
        states,
        record,
        lambda r: transitions.begin_step(
            r, owner, "arrange-shipment", "shipping", f"{owner}:ship", clock.now() + STEP_TIMEOUT, clock.now()
        ),
    )


def test_attempts_failing_on_an_open_dependency_do_not_spend_the_retry_budget(make_ctx, health, states, clock, sender):
    ctx = with_health(make_ctx, health)
    open_circuit(ctx)
    shipping_in_flight(states, clock)
    scan = ScanState()
    for attempt in range(1, 6):  # more attempts than MAX_FAILURES
        clock.advance(just_past(STEP_TIMEOUT))
        report = run_supervisor(ctx, scan)
        record = states.get("o1")
        assert record is not None
        assert record.process_state is ProcessState.PENDING, record.last_error
        assert record.failure_count == 0
        assert record.history[-1].event == "OutageWait"
        assert record.last_error == "waiting for shipping (circuit open)"
        probe = health.get("shipping").next_probe(clock.now(), ctx.settings.circuit_policy)
        cooldown = ctx.settings.circuit_policy.cooldown_after(health.get("shipping").reopens)
        assert probe <= record.complete_by <= probe + cooldown
        assert report.to_terminate == [f"o1:{attempt}"]
        clock.set(record.complete_by)
        next_attempt_in_flight(states, clock)
    # one alert for the outage (supervisor/outage.py), none for the order, no Failed status
    assert [(q, json.loads(m.body)["kind"]) for q, m in sender.sent] == [(OPERATOR_ALERTS_QUEUE, "DependencyOutage")]


def test_the_submitter_hears_waiting_for_the_dependency_once_per_wait_not_per_retry(
    make_ctx, health, states, clock, sender
):
    ctx = with_health(make_ctx, health)
    open_circuit(ctx)
    created = states.create(transitions.new_record("o1", "replies-1", clock.now()))
    claim = update_once(states, created, lambda r: transitions.claim(r, clock.now(), STEP_TIMEOUT))
    _begin_shipping(states, clock, claim)
    scan = ScanState()
    for _ in range(4):  # four retries of the same wait
        clock.advance(just_past(STEP_TIMEOUT))
        run_supervisor(ctx, scan)
        record = states.get("o1")
        assert record.history[-1].event == "OutageWait"
        clock.set(record.complete_by)
        next_attempt_in_flight(states, clock)
    statuses = [(m.message_id, json.loads(m.body)) for q, m in sender.sent if q == "replies-1"]
    assert [(s["status"], s["attempt"], s["reason"]) for _id, s in statuses] == [
        ("Processing", 1, "waiting for shipping (circuit open)")
    ]
    assert statuses[0][0] == "o1:Processing:1:waiting"  # not the attempt's own Processing status id


def test_a_failure_on_a_healthy_dependency_still_counts(make_ctx, health, states, clock):
    ctx = with_health(make_ctx, health)
    shipping_in_flight(states, clock)
    clock.advance(just_past(STEP_TIMEOUT))
    run_supervisor(ctx, ScanState())
    record = states.get("o1")
    assert record.process_state is ProcessState.PENDING
    assert record.failure_count == 1
    assert record.history[-1].event == "RetryScheduled"


def test_an_outage_that_closed_after_the_step_began_still_is_not_the_orders_failure(make_ctx, health, states, clock):
    ctx = with_health(make_ctx, health)
    shipping_in_flight(states, clock)
    open_circuit(ctx)
    closed_after = timedelta(seconds=40)  # into the step, before its deadline
    clock.advance(closed_after)
    now = clock.now()
    update_health(health, "shipping", lambda h: (record_success(h, now)[0], None), now)
    clock.advance(just_past(STEP_TIMEOUT) - closed_after)  # the step's deadline passes
    run_supervisor(ctx, ScanState())
    record = states.get("o1")
    assert record.process_state is ProcessState.PENDING and record.failure_count == 0
    assert clock.now() <= record.complete_by <= clock.now() + ctx.settings.circuit_policy.cooldown


def test_past_max_outage_wait_the_order_escalates_saying_why(make_ctx, health, states, clock, sender):
    ctx = with_health(make_ctx, health, MAX_OUTAGE_WAIT_MINUTES="2")
    open_circuit(ctx)
    shipping_in_flight(states, clock)
    scan = ScanState()
    for _ in range(10):
        clock.advance(just_past(STEP_TIMEOUT))
        run_supervisor(ctx, scan)
        record = states.get("o1")
        if record.process_state is not ProcessState.PENDING:
            break
        clock.set(record.complete_by)
        next_attempt_in_flight(states, clock)
    assert record.process_state is ProcessState.ERROR
    assert "MAX_OUTAGE_WAIT_MINUTES=2" in record.last_error and "shipping" in record.last_error
    assert record.failure_count == 1  # only the escalation itself
    alerts = [json.loads(m.body) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    assert [a["kind"] for a in alerts] == ["DependencyOutage", "RetriesExhausted"]
    assert "MAX_OUTAGE_WAIT_MINUTES" in alerts[1]["summary"]  # the per-order alert says why


def test_zero_max_outage_wait_turns_waiting_off(make_ctx, health, states, clock):
    ctx = with_health(make_ctx, health, MAX_OUTAGE_WAIT_MINUTES="0")
    open_circuit(ctx)
    shipping_in_flight(states, clock)
    clock.advance(just_past(STEP_TIMEOUT))
    run_supervisor(ctx, ScanState())
    assert states.get("o1").failure_count == 1


def compensation_round_after_a_charge(ctx, states, clock):
    """o1: charge-payment succeeded (a compensable step: its undo is a refund), then the order is
    compensated and the supervisor claimed its first round."""
    record = claimed(states, "o1", clock.now(), clock.now() + STEP_TIMEOUT)
    owner = record.locked_by
    assert owner is not None
    record = update_once(
        states,
        record,
        lambda r: transitions.begin_step(r, owner, "charge-payment", "payment", "req", clock.now(), clock.now()),
    )
    record = update_once(
        states,
        record,
        lambda r: complete_step_logged(r, owner, "charge-payment", {"chargeId": "c1"}, clock.now(), clock.now()),
    )
    record = update_once(states, record, lambda r: enter_compensation(r, owner, "cancelled", clock.now(), owner=owner))
    return update_once(
        states, record, lambda r: claim_compensation(r, clock.now(), STEP_TIMEOUT, ctx.settings.max_failures, "test")
    )


def test_a_compensation_round_stuck_on_an_open_dependency_waits_and_is_not_counted(make_ctx, health, states, clock):
    ctx = with_health(make_ctx, health)
    record = compensation_round_after_a_charge(ctx, states, clock)
    assert record.locked_by is not None and record.failure_count == 0
    open_circuit(ctx, "payment")
    for _ in range(5):  # more rounds than MAX_FAILURES
        clock.advance(just_past(STEP_TIMEOUT))
        claims = claim_due_compensations(ctx)
        record = states.get("o1")
        assert record.process_state is ProcessState.COMPENSATING
        assert record.failure_count == 0 and record.locked_by is None
        assert record.history[-1].event == "OutageWait"
        assert claims.starts == [] and len(claims.stale_instances) == 1
        clock.set(record.complete_by)
        claims = claim_due_compensations(ctx)  # the next round, claimed without a failure counted
        [_start] = claims.starts
        assert states.get("o1").failure_count == 0


class HealthUnavailableFor(CosmosHealthStore):
    """The health store over the shared one, its first ``reads`` reads failing as a Cosmos 503 does."""

    def __init__(self, inner: CosmosHealthStore, reads: int) -> None:
        self._inner, self.reads = inner, reads

    def get(self, dependency: str) -> DependencyHealth | None:
        if self.reads > 0:
            self.reads -= 1
            raise StoreUnavailable("Cosmos DB 503 on get")
        return self._inner.get(dependency)

    def save(self, doc: DependencyHealth) -> DependencyHealth:
        return self._inner.save(doc)

    def count_waiting(self, reason: str) -> int:
        return self._inner.count_waiting(reason)


def test_an_unreadable_health_document_leaves_the_attempt_for_the_next_run_never_counted(
    make_ctx, health, states, clock
):
    """Found by fuzzing (a shipping outage with 13 % of Cosmos requests failing 503, seed 3766): each
    expired attempt whose health read met a 503 was counted, and three of them during one outage sent
    orders to Error for the outage alone (``outage_only_failures``)."""
    flaky = HealthUnavailableFor(health, reads=1)
    ctx = make_ctx(health=flaky, **OUTAGE_SETTINGS)
    open_circuit(with_health(make_ctx, health))
    shipping_in_flight(states, clock)
    clock.advance(just_past(STEP_TIMEOUT))
    report = run_supervisor(ctx, ScanState())
    record = states.get("o1")
    assert (report.failed, record.process_state, record.failure_count) == (1, ProcessState.PROCESSING, 0)

    clock.advance(timedelta(seconds=30))  # the next run reads the health: the outage's, not counted
    run_supervisor(ctx, ScanState())
    record = states.get("o1")
    assert (record.history[-1].event, record.failure_count) == ("OutageWait", 0)


def failed_on_its_own(ctx, states, clock, calls):
    """The attempt in flight on shipping ended on its agent's transient failures: ``calls`` failed calls counted on
    the health document (fewer than the threshold: the circuit stays closed), then its release for retry."""
    now = clock.now()
    policy = ctx.settings.circuit_policy
    for _ in range(calls):
        update_health(ctx.health, "shipping", lambda h: (record_failure(h, now, policy)[0], None), now)
    record = states.get("o1")
    owner = record.locked_by
    update_once(
        states, record, lambda r: transitions.release_for_retry(r, owner, "arrange-shipment", "shipping down", now)
    )


def test_an_order_alone_failing_transiently_on_a_closed_circuit_waits_uncounted(make_ctx, health, states, clock):
    """An order alone in an outage: its agent's four calls are fewer than CIRCUIT_FAILURE_THRESHOLD, so the circuit
    never opens; counted, its attempts ended it Error with only the outage to blame (a red team's lone order,
    ``outage-under-cosmos-errors`` with one order). No success since its failures: it waits, uncounted."""
    ctx = with_health(make_ctx, health, CIRCUIT_FAILURE_THRESHOLD="8")
    shipping_in_flight(states, clock)
    scan = ScanState()
    for attempt in range(1, 5):  # more attempts than MAX_FAILURES; 7 failed calls in all, under the threshold
        failed_on_its_own(ctx, states, clock, 4 if attempt == 1 else 1)
        run_supervisor(ctx, scan)
        record = states.get("o1")
        assert (record.process_state, record.failure_count) == (ProcessState.PENDING, 0), record.last_error
        assert record.history[-1].event == "OutageWait"
        assert health.get("shipping").state is CircuitState.CLOSED
        clock.set(record.complete_by)
        next_attempt_in_flight(states, clock)


def test_an_order_failing_on_a_closed_circuit_backs_off_as_long_as_it_has_waited(make_ctx, health, states, clock):
    """A slow service (calls outliving REMOTE_CALL_TIMEOUT, committed later, retries answered "still working") opens
    no circuit any more (docs/supervisor.md, "What counts toward a circuit"); its orders wait, uncounted, while it
    has had no success. They came back within one cool-down: a new attempt every half minute fenced the call still
    running at the service for the one before, and again (``slow-remote-calls``: the slowest orders took 45 to 60
    minutes, one ended CompensationFailed). Each wait is now at least as long as the order has waited, from the
    cool-down to its cap (plus up to one cool-down of jitter)."""
    ctx = with_health(make_ctx, health, CIRCUIT_FAILURE_THRESHOLD="8")
    policy = ctx.settings.circuit_policy
    shipping_in_flight(states, clock)
    waits = []
    for _ in range(5):
        failed_on_its_own(ctx, states, clock, 1)
        run_supervisor(ctx, ScanState())
        record = states.get("o1")
        assert (record.history[-1].event, record.failure_count) == ("OutageWait", 0)
        assert record.outage_wait_since is not None
        waits.append((record.complete_by - clock.now(), clock.now() - record.outage_wait_since))
        clock.set(record.complete_by)
        next_attempt_in_flight(states, clock)
    for wait, waited in waits:
        least = min(max(waited, policy.cooldown), policy.cooldown_max)
        assert least <= wait <= least + policy.cooldown, (wait, waited)
    assert waits[-1][0] >= policy.cooldown_max


def test_a_transient_failure_after_which_the_service_answered_another_order_still_counts(
    make_ctx, health, states, clock
):
    ctx = with_health(make_ctx, health, CIRCUIT_FAILURE_THRESHOLD="8")
    shipping_in_flight(states, clock)
    failed_on_its_own(ctx, states, clock, 4)
    now = clock.now()
    update_health(ctx.health, "shipping", lambda h: (record_success(h, now)[0], None), now)  # another order's call
    run_supervisor(ctx, ScanState())
    record = states.get("o1")
    assert (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)
    assert record.history[-1].event == "RetryScheduled"


def test_a_deadline_passed_with_failures_in_a_row_still_counts(make_ctx, health, states, clock):
    """Only an attempt that ended on its agent's transient failures is taken for an outage's on a closed circuit:
    one whose deadline passed (a lost reply, a crashed agent) counts, whatever the failures in a row."""
    ctx = with_health(make_ctx, health, CIRCUIT_FAILURE_THRESHOLD="8")
    shipping_in_flight(states, clock)
    now = clock.now()
    policy = ctx.settings.circuit_policy
    update_health(ctx.health, "shipping", lambda h: (record_failure(h, now, policy)[0], None), now)
    clock.advance(just_past(STEP_TIMEOUT))
    run_supervisor(ctx, ScanState())
    record = states.get("o1")
    assert (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)


@pytest.mark.parametrize("circuit", ["closed, failing", "open"])
def test_no_wait_is_scheduled_past_max_outage_wait(make_ctx, health, states, clock, circuit):
    """MAX_OUTAGE_WAIT_MINUTES bounds the wait: an order is never put back past ``outageWaitSince`` plus the bound,
    so the attempt that finds the bound over runs at it, not later. Each wait's end was the next probe (or, on a
    closed circuit with no success since, as long as the order had waited, up to CIRCUIT_COOLDOWN_MAX_SECONDS) plus up
    to a cool-down of jitter, whatever was left of the bound: with the defaults (60 s and 240 s, jitter up to 240 s
    after failed probes) the order's last try came up to eight minutes past it, and its escalation with it."""
    ctx = with_health(make_ctx, health, CIRCUIT_FAILURE_THRESHOLD="8", MAX_OUTAGE_WAIT_MINUTES="5")
    if circuit == "open":
        open_circuit(ctx)
    bound = ctx.settings.max_outage_wait
    shipping_in_flight(states, clock)
    for _ in range(20):
        failed_on_its_own(ctx, states, clock, 0 if circuit == "open" else 1)
        run_supervisor(ctx, ScanState())
        record = states.get("o1")
        if record.process_state is not ProcessState.PENDING:
            break
        assert record.history[-1].event == "OutageWait" and record.outage_wait_since is not None
        assert record.complete_by <= record.outage_wait_since + bound, (record.complete_by, record.outage_wait_since)
        clock.set(record.complete_by)
        next_attempt_in_flight(states, clock)
    assert record.process_state is ProcessState.ERROR and "MAX_OUTAGE_WAIT_MINUTES=5" in record.last_error


def still_working_at_a_busy_service(ctx, states, clock):
    """The attempt in flight on shipping: its last try answered "still working on an earlier call with this key", and
    another order's call succeeded since (a busy service: its failures in a row reset), then its release for retry."""
    now = clock.now()
    update_health(ctx.health, "shipping", lambda h: (record_in_progress(h, now)[0], None), now)
    update_health(ctx.health, "shipping", lambda h: (record_success(h, now)[0], None), now)
    record = states.get("o1")
    owner = record.locked_by
    update_once(
        states,
        record,
        lambda r: transitions.release_for_retry(
            r, owner, "arrange-shipment", "shipping is still working on an earlier call", now, still_working=True
        ),
    )


def test_a_step_still_working_at_a_busy_service_waits_up_to_max_outage_wait_then_escalates(
    make_ctx, health, states, clock, sender, caplog
):
    """Red team 2: an attempt whose step its service was still working on, at a service other orders' calls
    succeeded at, was counted (it read as the order's failure): its retries, each answered "still working" while the
    first call ran, escalated an order the service was completing. It waits, uncounted, and the wait is bounded:
    past MAX_OUTAGE_WAIT_MINUTES the order escalates, saying why."""
    caplog.set_level(logging.INFO)
    ctx = with_health(make_ctx, health, MAX_OUTAGE_WAIT_MINUTES="3")
    shipping_in_flight(states, clock)
    scan = ScanState()
    for _ in range(20):
        still_working_at_a_busy_service(ctx, states, clock)
        run_supervisor(ctx, scan)
        record = states.get("o1")
        if record.process_state is not ProcessState.PENDING:
            break
        assert (record.history[-1].event, record.failure_count) == ("OutageWait", 0), record.last_error
        clock.set(record.complete_by)
        next_attempt_in_flight(states, clock)
    assert record.process_state is ProcessState.ERROR
    assert "still working on the order's call" in record.last_error and "MAX_OUTAGE_WAIT_MINUTES=3" in record.last_error
    assert record.failure_count == 1  # only the escalation itself
    waits = [r for r in caplog.records if getattr(r, "event", None) == "SupervisorOutageWait"]
    assert waits and all(getattr(r, "stillWorking", None) is True for r in waits), waits
    alerts = [json.loads(m.body) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    assert [a["kind"] for a in alerts] == ["RetriesExhausted"]


def test_an_order_waiting_on_a_circuit_opened_by_an_agent_whose_clock_runs_ahead_comes_back_within_a_cool_down(
    make_ctx, health, states, clock
):
    """An agent whose clock runs an hour ahead opened the circuit: ``probeAfter`` an hour into the supervisor's future.
    Before, the order waited until then, which the wait's bound (MAX_OUTAGE_WAIT_MINUTES, 60) cut: it came back only
    to escalate. Now it comes back a cool-down (plus the jitter) after the supervisor read it, as the agents probe."""
    ctx = with_health(make_ctx, health)
    policy = ctx.settings.circuit_policy
    ahead = clock.now() + timedelta(hours=1)
    for _ in range(policy.threshold):
        update_health(ctx.health, "shipping", lambda h: (record_failure(h, ahead, policy)[0], None), ahead)
    shipping_in_flight(states, clock)
    clock.advance(just_past(STEP_TIMEOUT))
    run_supervisor(ctx, ScanState())
    record = states.get("o1")
    assert record.process_state is ProcessState.PENDING and record.history[-1].event == "OutageWait"
    assert record.complete_by <= clock.now() + policy.cooldown_after(0) * 2, (record.complete_by, clock.now())
