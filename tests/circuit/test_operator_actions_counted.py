"""``operator_actions`` (localrun/outages.py): an attempt the supervisor counted is the order's own
failure when its step's service had no injected outage while it ran and no agent refused it on an
open circuit. Found at 300 orders (all-faults, seed 1): ord-00129 waited out the payment outage,
then lost three attempts to a crashed agent and lost replies minutes after every outage had ended,
escalated, and was counted as failed by the outage alone."""

from __future__ import annotations

from datetime import datetime, timedelta

from domain.states import ProcessState
from localrun.audit import Transition
from localrun.outages import operator_actions

T0 = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
PAYMENT_OUTAGE = (T0 + timedelta(seconds=60), T0 + timedelta(seconds=150))
WINDOWS = {"payment": [PAYMENT_OUTAGE], "shipping": [(T0 + timedelta(seconds=150), T0 + timedelta(seconds=210))]}
ESCALATED = {"processState": "Error", "lastError": "retries exhausted after 3 failed attempts; last: step missed"}
PENDING, PROCESSING = ProcessState.PENDING, ProcessState.PROCESSING


def at(seconds: float, event: str, by: str = "supervisor", detail: str = "") -> Transition:
    after = PENDING if event in ("OutageWait", "RetryScheduled") else PROCESSING
    return Transition(T0 + timedelta(seconds=seconds), "o", PROCESSING, after, event, by, None, detail)


def attempt(start: float, step: str, agent: str, counted_at: float, event: str = "RetryScheduled") -> list[Transition]:
    return [
        at(start, "Claimed", "starter"),
        at(start, "StepStarted", "o:n", f"{step} via {agent}, deadline later"),
        at(counted_at, event),
    ]


def waited_then(*attempts: list[Transition]) -> list[Transition]:
    waited = [
        at(0, "Claimed", "starter"),
        at(1, "StepStarted", "o:1", "charge-payment via payment"),
        at(90, "OutageWait"),
    ]
    return waited + [t for a in attempts for t in a]


def test_attempts_counted_after_every_outage_ended_are_the_orders_own_failures() -> None:
    transitions = waited_then(
        attempt(240, "charge-payment", "payment", 300),
        attempt(320, "arrange-shipment", "shipping", 390),
        attempt(420, "arrange-shipment", "shipping", 480, "Escalated"),
    )
    actions = operator_actions({"o": ESCALATED}, transitions, [], WINDOWS, waiting_enabled=True)
    assert actions.outage_only == []
    assert actions.unexpected == []


def test_attempts_counted_while_their_service_was_down_are_the_outages() -> None:
    """The control: the same order, its counted attempts running inside the payment outage (the
    supervisor counting instead of waiting), is failed by the outage alone and the invariant sees it."""
    transitions = waited_then(
        attempt(95, "charge-payment", "payment", 110),
        attempt(115, "charge-payment", "payment", 130),
        attempt(135, "charge-payment", "payment", 149, "Escalated"),
    )
    actions = operator_actions({"o": ESCALATED}, transitions, [], WINDOWS, waiting_enabled=True)
    assert actions.unexpected == ["o"]


def test_an_attempt_refused_on_a_circuit_still_open_after_the_outage_counts_as_the_outages() -> None:
    """The circuit stays open until a probe succeeds, after the injected outage ended: an attempt an
    agent refused then is the outage's, and counting it is the regression the invariant is for."""
    refused = at(241, "StepTransientFailure", "o:n", "charge-payment: payment unavailable (circuit open): not called")
    first, second, third = (
        attempt(240, "charge-payment", "payment", 250),
        attempt(260, "charge-payment", "payment", 270),
        attempt(280, "charge-payment", "payment", 290, "Escalated"),
    )
    transitions = waited_then(*([*a[:2], refused, a[2]] for a in (first, second, third)))
    actions = operator_actions({"o": ESCALATED}, transitions, [], WINDOWS, waiting_enabled=True)
    assert actions.outage_only == ["o"]
    # one of the three not refused, after the outage: that one was the order's own
    own = waited_then([*first[:2], refused, first[2]], [*second[:2], refused, second[2]], third)
    assert operator_actions({"o": ESCALATED}, own, [], WINDOWS, waiting_enabled=True).outage_only == []


def test_an_attempt_whose_reply_was_lost_inside_the_outage_window_is_the_orders_own_failure() -> None:
    """Found at all-faults seeds 3 and 8: the charge took effect at 29 s on a healthy payment service,
    its reply was lost, and the attempt was counted at 90 s, after the payment outage began at 60 s.
    Its span overlaps the outage, but the runner lost the reply: the order's own failure."""
    transitions = [
        *attempt(20, "charge-payment", "payment", 90),
        *attempt(95, "charge-payment", "payment", 110, "OutageWait"),  # the outage seen: waited, not counted
        *attempt(115, "charge-payment", "payment", 130),
        *attempt(135, "charge-payment", "payment", 149, "Escalated"),
    ]
    lost_reply = [("o", T0 + timedelta(seconds=29))]
    actions = operator_actions({"o": ESCALATED}, transitions, [], WINDOWS, waiting_enabled=True, own_faults=lost_reply)
    assert actions.outage_only == []
    # the control: without that evidence the same escalation is the outage's, and the invariant sees it
    assert operator_actions({"o": ESCALATED}, transitions, [], WINDOWS, waiting_enabled=True).unexpected == ["o"]


def test_a_fault_in_an_earlier_attempt_that_was_not_counted_does_not_excuse_the_counted_ones() -> None:
    """An agent crash during the first attempt, whose redelivery succeeded (that attempt was not
    counted: the order waited the outage out), says nothing about the counted attempts after it."""
    transitions = waited_then(
        attempt(95, "charge-payment", "payment", 110),
        attempt(115, "charge-payment", "payment", 130),
        attempt(135, "charge-payment", "payment", 149, "Escalated"),
    )
    crash = [("o", T0 + timedelta(seconds=5))]
    actions = operator_actions({"o": ESCALATED}, transitions, [], WINDOWS, waiting_enabled=True, own_faults=crash)
    assert actions.unexpected == ["o"]


COMPENSATION_FAILED = {
    "processState": "CompensationFailed",
    "lastError": "compensation did not finish in 3 rounds; last: deadline missed",
}


def round_of(start: float, counted_at: float, event: str = "CompensationRetryScheduled") -> list[Transition]:
    return [
        at(start, "CompensationClaimed"),
        at(start, "UndoStarted", "o:compensate:n", "entry 1: refund charge-payment via payment (k), deadline later"),
        at(counted_at, event),
    ]


def test_compensation_rounds_counted_after_the_outage_are_the_orders_own_failures() -> None:
    """Fuzz seed 4023: a cancelled order's refund rounds got stuck on lost replies, one round waited out the
    payment outage, and the last round (on a closed circuit) got stuck too: ``CompensationFailed``, counted as
    failed by the outage alone because the classifier knew forward attempts only."""
    transitions = [
        *round_of(10, 40),
        at(60, "CompensationClaimed"),
        at(61, "UndoStarted", "o:compensate:n", "entry 1: refund charge-payment via payment (k), deadline later"),
        at(90, "OutageWait"),
        *round_of(240, 300, "CompensationFailed"),
    ]
    actions = operator_actions({"o": COMPENSATION_FAILED}, transitions, [], WINDOWS, waiting_enabled=True)
    assert actions.outage_only == [] and actions.unexpected == []
    # the control: the same rounds, all inside the payment outage, are the outage's
    inside = [*round_of(61, 80), at(90, "OutageWait"), *round_of(100, 140, "CompensationFailed")]
    actions = operator_actions({"o": COMPENSATION_FAILED}, inside, [], WINDOWS, waiting_enabled=True)
    assert actions.unexpected == ["o"]


def test_a_lost_reply_in_a_compensation_round_is_the_orders_own() -> None:
    """A round whose reply the runner lost during the outage still failed of its own accord."""
    inside = [*round_of(61, 80), at(90, "OutageWait"), *round_of(100, 140, "CompensationFailed")]
    lost_reply = [("o", T0 + timedelta(seconds=120))]
    actions = operator_actions(
        {"o": COMPENSATION_FAILED}, inside, [], WINDOWS, waiting_enabled=True, own_faults=lost_reply
    )
    assert actions.outage_only == []


def test_a_payment_notification_applied_while_waiting_does_not_end_the_wait() -> None:
    """Fuzzed profile (seed 50, ``MAX_OUTAGE_WAIT_MINUTES`` 5): ord-00113 waited out an inventory outage, its
    payment notification was applied meanwhile (``PaymentNotified``, a side note), and the supervisor escalated
    it by the bound 6 minutes into the wait. The runner ended the wait at the side note (about a minute) and
    counted the escalation as not the bound's: ``outage_only_failures`` 1."""
    bound_reason = {"processState": "Error", "lastError": "... beyond MAX_OUTAGE_WAIT_MINUTES=5: escalated ..."}
    outage = {"inventory": [(T0, T0 + timedelta(minutes=20))]}
    transitions = [
        at(0, "Claimed", "starter"),
        at(1, "StepStarted", "o:1", "reserve-inventory via inventory"),
        at(30, "OutageWait"),
        at(90, "PaymentNotified", "submission"),
        at(200, "Claimed", "starter"),
        at(201, "StepStarted", "o:2", "reserve-inventory via inventory"),
        at(202, "StepTransientFailure", "o:2", "reserve-inventory: inventory unavailable (circuit open): not called"),
        at(390, "Escalated"),
    ]
    actions = operator_actions(
        {"o": bound_reason}, transitions, [], outage, waiting_enabled=True, bound=timedelta(minutes=5)
    )
    assert actions.outage_only == ["o"]
    assert actions.unexpected == []


def test_a_counted_claim_that_never_reached_an_agent_is_the_orders_own_failure() -> None:
    """Fuzzed profile (seed 126: an inventory outage of half an hour, host restarts every 39 s): ord-00134 waited
    the outage out over nine claims, three of which the host's restarts orphaned between the claim and the
    start; the supervisor counted those three (nothing was in flight: no outage to wait for) and escalated. The
    runner took the order for one failed by the outage alone (``outage_only_failures`` 1): a counted attempt
    with no step begun was neither the outage's nor seen as the order's own."""
    outage = {"inventory": [(T0, T0 + timedelta(minutes=30))]}
    waited = [
        at(0, "Claimed", "starter"),
        at(1, "StepStarted", "o:1", "reserve-inventory via inventory"),
        at(30, "OutageWait"),
    ]
    orphaned = [at(100, "Claimed", "starter"), at(165, "RetryScheduled")]
    refused = [
        at(200, "Claimed", "starter"),
        at(201, "StepTransientFailure", "o:3", "reserve-inventory: inventory unavailable (circuit open): not called"),
        at(260, "RetryScheduled"),
    ]
    escalated = {"processState": "Error", "lastError": "retries exhausted after 3 failed attempts"}

    actions = operator_actions({"o": escalated}, [*waited, *orphaned], [], outage, waiting_enabled=True)
    assert actions.outage_only == []
    # the control: the same count of an attempt the open circuit refused is the outage's
    actions = operator_actions({"o": escalated}, [*waited, *refused], [], outage, waiting_enabled=True)
    assert actions.outage_only == ["o"] and actions.unexpected == ["o"]


def test_a_counted_compensation_round_that_never_began_an_undo_is_the_orders_own_failure() -> None:
    """Red team (s45, the Durable backend late: ``durable.delivery_delay_rate``): operator-cancels with 20 % of the
    backend's messages 30 s to 10 minutes late, 150 orders, seed 6: ord-00051 waited out a payment outage over three
    rounds, then three rounds in a row were claimed and counted without their orchestration beginning an undo (each
    start reached the task hub's worker after the round's start grace), and the order ended ``CompensationFailed``.
    The supervisor counts such a round whatever the circuits say (nothing was in flight), as it counts a forward
    attempt that never reached an agent; the runner knew the forward case only and took the order for one failed
    by the outage alone (``outage_only_failures`` 2, with ord-00045). A host stopping between a round's claim and
    its start leaves the same."""
    outage = {"payment": [(T0, T0 + timedelta(minutes=30))]}
    waited = [
        at(0, "CompensationClaimed"),
        at(1, "UndoStarted", "o:compensate:1", "entry 1: refund charge-payment via payment (k), deadline later"),
        at(30, "OutageWait"),
    ]
    unstarted = [
        at(100, "CompensationClaimed"),
        at(165, "CompensationRetryScheduled"),
        at(200, "CompensationClaimed"),
        at(265, "CompensationRetryScheduled"),
        at(300, "CompensationClaimed"),
        at(365, "CompensationFailed"),
    ]
    refused = [
        at(100, "CompensationClaimed"),
        at(101, "UndoDependencyOpen", "o:compensate:2", "refund charge-payment: payment unavailable (circuit open)"),
        at(165, "CompensationFailed"),
    ]

    actions = operator_actions({"o": COMPENSATION_FAILED}, [*waited, *unstarted], [], outage, waiting_enabled=True)
    assert actions.outage_only == []
    # the control: the same count of a round the open circuit refused is the outage's
    actions = operator_actions({"o": COMPENSATION_FAILED}, [*waited, *refused], [], outage, waiting_enabled=True)
    assert actions.outage_only == ["o"] and actions.unexpected == ["o"]
