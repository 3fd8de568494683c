"""Red team of the report's ``operator_actions_needed`` / invariant ``outage_only_failures``
(localrun/outages.py): an attempt an agent refused because the dependency's circuit was open made no
remote call, so the runner's remote probe never sees it. An order whose attempts all failed that way
(the supervisor counted them instead of waiting: the very regression the invariant exists for) must
still count as failed by an outage alone. Measured before the fix: 60 orders of the
dependency-outages profile with MAX_OUTAGE_WAIT_MINUTES=0, 52 failed on the outage alone, 13 seen."""

from __future__ import annotations

from datetime import datetime, timedelta

from domain.states import ProcessState
from localrun.audit import RemoteFailure, Transition
from localrun.outages import operator_actions

T0 = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
WINDOWS = {"payment": [(T0, T0 + timedelta(minutes=15))]}
FAILED_FAST = "charge-payment: payment unavailable (circuit open): not called"  # order_agents/runtime.py


def transient_failure(seconds: float, order: str, detail: str) -> Transition:
    return Transition(
        T0 + timedelta(seconds=seconds),
        order,
        ProcessState.PROCESSING,
        ProcessState.PROCESSING,
        "StepTransientFailure",
        f"{order}:1",
        None,
        detail,
    )


def escalated(order: str) -> dict[str, str]:
    return {"processState": "Error", "lastError": f"retries exhausted after 3 failed attempts; last: {FAILED_FAST}"}


def test_an_order_whose_attempts_failed_fast_on_an_open_circuit_failed_on_the_outage_alone() -> None:
    finals = {"fast": escalated("fast"), "mixed": escalated("mixed")}
    transitions = [transient_failure(60 * n, order, FAILED_FAST) for order in ("fast", "mixed") for n in (1, 2, 3)]
    # "mixed" also had a permanent refusal of its own: still the order's failure
    failures = [RemoteFailure(T0 + timedelta(minutes=20), "mixed", "payment", False)]
    actions = operator_actions(finals, transitions, failures, WINDOWS, waiting_enabled=True)
    assert actions.outage_only == ["fast"]
    assert actions.unexpected == ["fast"]  # the invariant sees it


def test_a_transient_failure_of_the_orders_own_is_not_an_outage() -> None:
    finals = {"own": escalated("own")}
    transitions = [transient_failure(60, "own", "charge-payment: payment timed out")]
    actions = operator_actions(finals, transitions, [], WINDOWS, waiting_enabled=True)
    assert actions.outage_only == []


def wait_then(order: str, waited_s: float, end: str) -> list[Transition]:
    """An order that began waiting at 0, was retried while waiting, and ended with ``end`` at ``waited_s``."""
    return [
        Transition(T0 + timedelta(seconds=s), order, before, after, event, "supervisor", None)
        for s, before, after, event in (
            (0, ProcessState.PROCESSING, ProcessState.PENDING, "OutageWait"),
            (30, ProcessState.PENDING, ProcessState.PROCESSING, "Claimed"),
            (31, ProcessState.PROCESSING, ProcessState.PROCESSING, "StepStarted"),
            (90, ProcessState.PROCESSING, ProcessState.PENDING, "OutageWait"),
            (waited_s, ProcessState.PENDING, ProcessState.ERROR, end),
        )
    ]


def test_an_order_escalated_by_the_bound_before_it_waited_that_long_is_not_by_design() -> None:
    """The exemption for MAX_OUTAGE_WAIT_MINUTES must rest on the runner's evidence (how long the
    order waited), not on the app's own lastError: a bound measured from a stale start (an old wait)
    escalates early and must still count."""
    bound = timedelta(minutes=60)
    reason = "payment unavailable (circuit open) and the order waited 61 min, beyond MAX_OUTAGE_WAIT_MINUTES=60"
    finals = {o: {"processState": "Error", "lastError": f"retries exhausted; last: {reason}"} for o in ("early", "due")}
    transitions = wait_then("early", 120, "Escalated") + wait_then("due", 3601, "Escalated")
    actions = operator_actions(finals, transitions, [], WINDOWS, waiting_enabled=True, bound=bound)
    assert actions.outage_only == ["due", "early"]
    assert actions.by_the_bound == ["due"]
    assert actions.unexpected == ["early"]


def test_a_compensation_whose_undos_were_refused_on_an_open_circuit_failed_on_the_outage_alone() -> None:
    """The same for an undo: a round whose agent refused it on the open circuit writes ``UndoDependencyOpen``
    (domain.compensation.release_undo). Here the outage's injected window had ended, the circuit not yet closed
    (its cool-down), and the supervisor counted the round (waiting off): no failed call, no wait, yet the outage
    alone failed the compensation."""
    at = T0 + timedelta(minutes=16)
    compensating = ProcessState.COMPENSATING
    rows = (
        (0, compensating, "CompensationClaimed", "supervisor", "undo:compensate:2"),
        (1, compensating, "UndoStarted", "undo:compensate:2", "entry 1: refund charge-payment via payment (r)"),
        (
            2,
            compensating,
            "UndoDependencyOpen",
            "undo:compensate:2",
            f"entry 1: refund charge-payment via payment: {FAILED_FAST}",
        ),
        (30, ProcessState.COMPENSATION_FAILED, "CompensationFailed", "supervisor", "did not finish in 1 rounds"),
    )
    transitions = [
        Transition(at + timedelta(seconds=s), "undo", compensating, after, event, by, None, detail)
        for s, after, event, by, detail in rows
    ]
    finals = {"undo": {"processState": "CompensationFailed", "lastError": f"did not finish; last: {FAILED_FAST}"}}
    actions = operator_actions(finals, transitions, [], WINDOWS, waiting_enabled=False)
    assert actions.outage_only == ["undo"]
