"""Red team (observability): what the app logs, checked against what happened, under fault profiles.

Each profile runs through the local runner (the unmodified app, the Cosmos DB protocol server, the Durable SDK's
replay) with a handler on the root logger that keeps every record the app writes. What happened comes from the
runner's side, never from the app's claims: every state write Cosmos DB accepted (``Audit.transitions``, from
the answers of the audited store, a claimed create counted as its two moves) and every alert on
``operator-alerts``. The checks:

- every write of a state record is one ``StateTransition`` event with its order, attempt and from/to states,
  and no event claims a write that was not made (a write whose answer was lost, found landed later, included);
- every retry, escalation or wait the supervisor wrote is its event (``SupervisorRecovered``...);
- every alert that reached ``operator-alerts`` was logged (``OperatorAlert``, at ERROR);
- every event about an orchestration instance names its order (``orderId``, what the dashboards query by);
- orchestrator code logs nothing (the replay engine runs it again on every episode: each line would repeat);
- no record carries an order's payload (what a customer sent: where to ship, who they are) or a secret."""

from __future__ import annotations

import gc
import logging
import weakref
from collections import Counter

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.ids import instance_order_id
from tests.kept_runs import KEPT, Kept, Observed
from tests.kept_runs import fields as _fields
from tests.kept_runs import kept_run as observed

pytestmark = pytest.mark.e2e
# profile -> (orders, seed): the runs of tests/e2e/test_fault_profiles.py (100 orders each, with the faults it is
# named for), made once when both files run in one pytest run (dev.py's e2e run; tests/kept_runs.py)
PROFILES = KEPT
# What a record must never hold: an order's payload (the runner's orders ship to "<n> Simulation Street" for
# customers "cust-<n>") or a key (the Cosmos DB emulator's well-known key, a Service Bus or storage key).
FORBIDDEN = ("Simulation Street", "cust-", "unitPriceCents", "AccountKey=", "SharedAccessKey=", "C2y6yDjf5")


def _written(o: Observed) -> Counter[tuple[str, str, str, str]]:
    return Counter(
        (t.order_id, t.before.value if t.before else "(new)", t.after.value, t.event)
        for t in o.result.audit.transitions
    )


def _logged(o: Observed, name: str = "StateTransition") -> Counter[tuple[str, str, str, str]]:
    return Counter(
        (r.orderId, r.fromState, r.toState, r.transition)  # type: ignore[attr-defined]
        for r in o.events(name)
    )


@pytest.mark.parametrize("profile", PROFILES)
def test_every_state_write_is_one_transition_event(profile: str) -> None:
    """A write whose answer was lost and that nothing read back since is seen as ``StateWriteUnconfirmed``,
    with the move it would make (it may not have landed); every other is its ``StateTransition``."""
    o = observed(profile)
    written, logged = _written(o), _logged(o)
    assert written, "the run wrote nothing"
    unlogged = sorted((written - logged - _logged(o, "StateWriteUnconfirmed")).elements())
    claimed = sorted((logged - written).elements())
    assert not unlogged, f"{len(unlogged)} writes Cosmos DB accepted with no StateTransition event: {unlogged[:10]}"
    assert not claimed, f"{len(claimed)} StateTransition events of writes Cosmos DB never accepted: {claimed[:10]}"


@pytest.mark.parametrize("profile", PROFILES)
def test_each_transition_event_names_the_order_attempt_and_states(profile: str) -> None:
    for r in observed(profile).events("StateTransition", "StateWriteUnconfirmed"):
        fields = {k: getattr(r, k, None) for k in ("orderId", "attempt", "fromState", "toState", "transition")}
        assert all(v is not None for v in fields.values()), fields
        assert isinstance(fields["attempt"], int), fields
        assert r.levelno == (logging.INFO if r.event == "StateTransition" else logging.WARNING), fields  # type: ignore[attr-defined]


# The supervisor's moves of an expired attempt (history event of its write) and the event each is logged as.
SUPERVISOR_MOVES = {
    "RetryScheduled": "SupervisorRecovered",
    "Escalated": "SupervisorEscalated",
    "OutageWait": "SupervisorOutageWait",
    "PaymentWait": "SupervisorPaymentWait",
    "StartMissed": "SupervisorStartMissed",
    "CompensationStartMissed": "SupervisorCompensationStartMissed",
}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_supervisor_retry_and_escalation_is_its_event(profile: str) -> None:
    o = observed(profile)
    moved = Counter(
        (t.order_id, SUPERVISOR_MOVES[t.event])
        for t in o.result.audit.transitions
        if t.by == "supervisor" and t.event in SUPERVISOR_MOVES
    )
    logged = Counter((r.orderId, r.event) for r in o.events(*SUPERVISOR_MOVES.values()))  # type: ignore[attr-defined]
    assert moved == logged, f"written, not logged: {moved - logged}; logged, not written: {logged - moved}"
    assert all(r.levelno >= logging.WARNING for r in o.events("SupervisorEscalated"))


@pytest.mark.parametrize("profile", PROFILES)
def test_every_alert_sent_was_logged_as_an_error(profile: str) -> None:
    o = observed(profile)
    sent = {m.message_id for m in o.result.broker.contents(OPERATOR_ALERTS_QUEUE)}
    logged = o.events("OperatorAlert")
    assert all(r.levelno == logging.ERROR for r in logged)
    unlogged = sent - {r.alertId for r in logged}  # type: ignore[attr-defined]
    assert not unlogged, f"alerts on {OPERATOR_ALERTS_QUEUE} never logged: {sorted(unlogged)[:10]}"


@pytest.mark.parametrize("profile", PROFILES)
def test_events_about_an_instance_name_its_order(profile: str) -> None:
    unnamed: Counter[str] = Counter()
    for r in observed(profile).records:
        instance = getattr(r, "instanceId", None)
        order = instance_order_id(instance) if isinstance(instance, str) else None
        if order is not None and getattr(r, "orderId", None) != order:
            unnamed[str(getattr(r, "event", None))] += 1
    assert not unnamed, f"events of an instance without its orderId: {dict(unnamed)}"


@pytest.mark.parametrize("profile", PROFILES)
def test_orchestrator_code_logs_nothing_a_replay_would_repeat(profile: str) -> None:
    lines = Counter(f"{r.name}: {r.msg}" for r in observed(profile).in_orchestrator)
    assert not lines, f"logged by orchestrator code (once per replay): {lines.most_common(5)}"


@pytest.mark.parametrize("profile", PROFILES)
def test_no_record_carries_an_order_payload_or_a_secret(profile: str) -> None:
    found: list[str] = []
    for r in observed(profile).records:
        text = f"{r.getMessage()} {_fields(r)}"
        found += [f"{r.name} {getattr(r, 'event', '')}: {word}" for word in FORBIDDEN if word in text]
    assert not found, found[:10]


def test_a_kept_record_keeps_no_frame_of_its_exception_alive() -> None:
    """What a cached record holds lives to interpreter exit: it must not be an invocation's arguments."""

    class Message:  # stands for the decoded uamqp message an invocation's frame holds
        pass

    kept = Kept()
    logger = logging.getLogger("tests.observability.kept")
    logger.addHandler(kept)
    logger.propagate = False  # pytest's own handlers keep the test's records until its report

    def invocation(message: Message) -> None:
        try:
            raise RuntimeError("refused")
        except RuntimeError as exc:
            logger.error("failed: %s", exc, exc_info=True, extra={"error": exc})

    message = Message()
    alive = weakref.ref(message)
    try:
        invocation(message)
    finally:
        logger.removeHandler(kept)
        logger.propagate = True
    del message
    gc.collect()
    assert alive() is None, "a kept record holds the failed invocation's frame"
    [record] = kept.records
    assert record.getMessage() == "failed: refused" and "RuntimeError: refused" in (record.exc_text or "")
