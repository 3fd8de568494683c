"""What the app told the runner's operator is checked against what happened (the report's
``operator_answers_broken``, ``localrun/operator_answers.py``). The runner's operator counted its answers, but nothing
checked that an answer was true: a discard answered "stands" (200) while the payment was in fact applied showed in
no simulation. Here each answer's promise is checked on evidence given by hand (held and broken), and, in whole runs,
an app that lies (a discard answered 200 that did nothing, while the order it was for came later and took the
payment; a resubmit and a review answer answered 200 whose writes never landed) is caught, where the real app is not.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest

import operations.actions as actions
import supervisor.operator as supervisor_operator
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from deferral.discard import Discard
from domain.states import ProcessState
from localrun.audit import Transition
from localrun.operator import OPERATOR_NAME, Operator
from localrun.operator_answers import Evidence, OperatorAnswer, broken_answers, checked_counts
from localrun.profile import OperatorPlan, Profile, ProfileError
from localrun.report import _operator_answers_broken, build_report
from localrun.servicebus import InProcessBroker
from localrun.simulation import SimulationConfig, run_simulation
from localrun.workload import make_workload
from tests.localrun.test_operator import PROFILE as OPERATOR_ACTIONS
from tests.localrun.test_operator import _answer, _Host
from tests.localrun.test_operator_discards_orderless import BOUND, ghost_run
from tests.localrun.test_orderless_payments import ORPHAN

T0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
S = ProcessState
ME = OPERATOR_NAME


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def move(t: float, before: ProcessState | None, after: ProcessState, event: str, by: str, detail: str = "") -> Any:
    return Transition(at(t), "o-1", before, after, event, by, None, detail)


def answer(action: str, t: float = 100, status: int = 200, **fields: Any) -> OperatorAnswer:
    return OperatorAnswer(at(t), "o-1", action, status, ME, **fields)


def check(
    said: OperatorAnswer,
    writes: list[Transition],
    final: str | None = None,
    dead: dict[int, str] | None = None,
    deferred: frozenset[int] = frozenset(),
    finals: dict[str, Any] | None = None,
    horizon_reached: bool = False,
) -> list[str]:
    docs = finals if finals is not None else ({"o-1": {"orderId": "o-1", "processState": final}} if final else {})
    evidence = Evidence(writes, docs, dead or {}, deferred, horizon_reached)
    return broken_answers([said], evidence)


# --- resubmit ---------------------------------------------------------------------------------------------------

FAILED = [move(0, None, S.PENDING, "Received", "submission"), move(1, S.PENDING, S.ERROR, "Failed", "supervisor")]
RESUBMITTED = [*FAILED, move(90, S.ERROR, S.PENDING, "Resubmitted", ME, "why")]


def test_a_resubmit_holds_once_its_write_landed_and_the_order_was_claimed_again() -> None:
    claimed = [*RESUBMITTED, move(120, S.PENDING, S.PROCESSING, "Claimed", "starter")]
    assert check(answer("resubmit"), claimed, "Processed") == []
    assert check(answer("resubmit", repeated=True), claimed, "Processed") == []  # its first post's write


def test_a_resubmit_whose_write_never_landed_or_that_nobody_claimed_is_broken() -> None:
    [never] = check(answer("resubmit"), FAILED, "Error")
    assert never.startswith("o-1: resubmit answered 200 at") and "no Resubmitted write" in never
    late = [*FAILED, move(150, S.ERROR, S.PENDING, "Resubmitted", ME)]  # after the answer: another request's
    assert "no Resubmitted write" in check(answer("resubmit"), late, "Pending")[0]
    [stuck] = check(answer("resubmit"), RESUBMITTED, "Pending")
    assert "never left Pending" in stuck
    assert check(answer("resubmit"), RESUBMITTED, "Pending", horizon_reached=True) == []  # cut: non_terminal's


# --- cancel and compensate --------------------------------------------------------------------------------------

CLAIMED = [move(0, None, S.PENDING, "Received", "submission"), move(0, S.PENDING, S.PROCESSING, "Claimed", "x")]
CANCEL = move(50, S.PROCESSING, S.COMPENSATING, "CompensationRequested", ME, f"cancelled by operator {ME}: why")


def test_a_cancel_holds_when_written_and_the_order_ended_in_its_undoing() -> None:
    assert check(answer("cancel"), [*CLAIMED, CANCEL], "Compensated") == []
    assert check(answer("cancel"), [*CLAIMED, CANCEL], "CompensationFailed") == []
    assert "no CompensationRequested write" in check(answer("cancel"), CLAIMED, "Processed")[0]
    [went_on] = check(answer("cancel"), [*CLAIMED, CANCEL], "Processed")
    assert "ended Processed, not Compensated" in went_on


def test_a_compensate_holds_when_a_round_ended_after_its_write() -> None:
    asked = move(50, S.ERROR, S.COMPENSATING, "CompensationRequested", ME, "why")
    ended = move(70, S.COMPENSATING, S.COMPENSATED, "Compensated", "o-1:2")
    assert check(answer("compensate"), [*FAILED, asked, ended], "Compensated") == []
    [no_round] = check(answer("compensate"), [*FAILED, asked], "Compensating")
    assert "no compensation round ended after it" in no_round
    # a cancel is no compensate, and another's compensate no write of this operator
    cancel_only = [*FAILED, move(50, S.ERROR, S.COMPENSATING, "CompensationRequested", "someone", "why"), ended]
    assert "no CompensationRequested write" in check(answer("compensate"), cancel_only, "Compensated")[0]


# --- review -----------------------------------------------------------------------------------------------------

RID = "o-1:1:payment:review:1"
ASKED = move(10, S.PROCESSING, S.PROCESSING, "ReviewRequested", "o-1:1", f"payment: {RID}, decide by 2026-01-01T08:10")
NOTED = move(60, S.PROCESSING, S.PROCESSING, "ReviewAnswered", ME, f"{RID}: compensate: why")


def test_a_review_answer_holds_when_the_attempt_acted_on_it() -> None:
    acted = move(61, S.PROCESSING, S.COMPENSATING, "CompensationRequested", "o-1:1", "operator review chose compensate")
    said = answer("review", review_id=RID, decision="compensate")
    assert check(said, [*CLAIMED, ASKED, NOTED, acted], "Compensated") == []
    closed = move(61, S.PROCESSING, S.PROCESSING, "ReviewClosed", "o-1:1", f"{RID}: compensate: answered by {ME}")
    assert check(said, [*CLAIMED, ASKED, NOTED, closed, acted], "Compensated") == []  # noted before the close


def test_a_review_answer_never_noted_taken_back_closed_otherwise_or_not_acted_on_is_broken() -> None:
    said = answer("review", review_id=RID, decision="compensate")
    assert "no note of the answer compensate" in check(said, [*CLAIMED, ASKED], "Processing")[0]
    again = move(61, S.PROCESSING, S.PROCESSING, "ReviewRequested", "o-1:1", ASKED.detail)
    assert "asked again after the answer" in check(said, [*CLAIMED, ASKED, NOTED, again], "Processed")[0]
    default = move(61, S.PROCESSING, S.PROCESSING, "ReviewClosed", "o-1:1", f"{RID}: retry: no answer in time")
    assert "closed otherwise" in check(said, [*CLAIMED, ASKED, NOTED, default], "Processed")[0]
    retried = move(62, S.PROCESSING, S.PROCESSING, "StepStarted", "o-1:1", "payment")
    assert "never went Compensating" in check(said, [*CLAIMED, ASKED, NOTED, retried], "Processed")[0]
    assert "nothing acted on it" in check(said, [*CLAIMED, ASKED, NOTED], "Processing")[0]


# --- discard ----------------------------------------------------------------------------------------------------

APPLIED = Transition(at(3700), "o-1", S.PENDING, S.PENDING, "PaymentNotified", "submission", None, "pay-1 (12.34 EUR)")


def test_a_discard_holds_when_its_message_is_dead_lettered_and_no_order_took_the_payment() -> None:
    said = answer("discard", sequence_number=7, notification_id="pay-1")
    assert check(said, [], dead={7: "DiscardedByOperator"}) == []
    assert (
        check(
            said, [], finals={"o-1": {"orderId": "o-1", "processState": "Processed"}}, dead={7: "DiscardedByOperator"}
        )
        == []
    )


def test_a_discard_whose_payment_was_applied_or_whose_message_was_not_dead_lettered_is_broken() -> None:
    said = answer("discard", sequence_number=7, notification_id="pay-1")
    [taken] = check(said, [APPLIED], dead={7: "DiscardedByOperator"})
    assert "the payment pay-1 was applied to order o-1" in taken
    paid = {"o-1": {"orderId": "o-1", "processState": "Processed", "payment": {"notificationId": "pay-1"}}}
    assert "was applied to order o-1" in check(said, [], finals=paid, dead={7: "DiscardedByOperator"})[0]
    assert "message #7 is not in the dead-letter queue" in check(said, [])[0]
    assert "message #7 is still deferred" in check(said, [], deferred=frozenset({7}))[0]
    assert check(said, [], deferred=frozenset({7}), horizon_reached=True) == []  # the sweep's, the run cut first
    assert "dead-lettered MaxDeliveryCountExceeded" in check(said, [], dead={7: "MaxDeliveryCountExceeded"})[0]


def test_a_discard_refused_for_an_order_that_exists_holds_only_if_it_does() -> None:
    said = answer("discard", status=409, sequence_number=7, order_exists=True)
    assert check(said, [], "Processed") == []
    assert "its order has no state record" in check(said, [])[0]
    assert check(answer("discard", status=409, sequence_number=7), []) == []  # another refusal: nothing promised


def test_what_is_checked_is_counted_by_action() -> None:
    answers = [
        answer("discard", sequence_number=7),
        answer("discard", status=409, order_exists=True),
        answer("discard", status=409),
        answer("resubmit", status=409),
        answer("cancel"),
    ]
    assert checked_counts(answers) == {"cancel": 1, "discard": 2}


# --- whole runs: an app that lies is caught -----------------------------------------------------------------------


def test_a_discard_answered_200_that_did_nothing_is_caught_when_the_order_takes_the_payment() -> None:
    """Mutation: the ops API answers the discard 200 (``discarded``, dead-lettered) without writing or dead-lettering
    anything. The order submitted an hour later takes the refunded payment; ``discarded_payments_applied`` sees
    nothing (no message was dead-lettered ``DiscardedByOperator``); the answer's check does."""
    plan = {"operator": {"after_s": [60, 120], "discard_orderless": True}}

    def lie(ctx: Any, order_id: str, seq: int, operator: str, reason: str) -> Discard:
        doc = ctx.deferrals.get(order_id)
        return Discard("discarded", entry=doc.entry(seq) if doc is not None else None, dead_lettered=True)

    with mock.patch.object(actions, "discard", lie):
        report, _ = ghost_run(plan)
    assert report["operator_actions"] == {"discard": {"done": 1}}
    assert report["invariants"]["discarded_payments_applied"] == 0  # blind to it
    assert report["invariants"]["operator_answers_broken"] == 1
    [broken] = report["invariant_examples"]["operator_answers_broken"]
    assert broken.startswith("ord-ghost: discard answered 200 at")
    assert "the payment pay-ghost was applied to order ord-ghost" in broken
    assert "not in the dead-letter queue" in broken


def test_the_real_discard_holds_and_is_checked() -> None:
    report, _ = ghost_run({"operator": {"after_s": [60, 120], "discard_orderless": True}})
    assert {k: v for k, v in report["invariants"].items() if v} == {}
    assert report["operator_answers_checked"] == {"discard": 1}


def test_a_resubmit_and_a_review_answer_whose_writes_never_landed_are_caught() -> None:
    """Mutation: the resubmit's write and the review answer's note hand back the record as it was, unwritten (the
    operator is told 200 all the same). Its operator-actions.json run: every such answer is named."""
    unwritten = mock.patch.object(supervisor_operator, "update_once_or_reread", lambda store, record, change: record)
    unnoted = mock.patch.object(actions, "update_once_or_reread", lambda store, record, change: record)
    with unwritten, unnoted:
        result = run_simulation(SimulationConfig(orders=20, seed=1, profile=Profile.load(OPERATOR_ACTIONS)))
    report = build_report(result)
    by_order = {d["orderId"]: d for d in result.states if "processState" in d}
    broken = _operator_answers_broken(result, by_order)  # all of them: the report's examples are five
    acted = report["operator_actions"]
    assert acted["resubmit"]["done"] > 0 and acted["review"]["done"] > 0, acted
    assert report["invariants"]["operator_answers_broken"] == len(broken) >= acted["resubmit"]["done"], broken
    assert any("resubmit answered 200" in e and "no Resubmitted write" in e for e in broken), broken
    assert any("review answered 200" in e and "no note of the answer" in e for e in broken), broken


# --- the workload's payments for orders that never come ----------------------------------------------------------


@pytest.mark.parametrize("rate", [-0.1, 1.5, "0.1", True, None])
def test_the_rate_of_orderless_notifications_is_a_probability(rate: Any) -> None:
    with pytest.raises(ProfileError, match=r"orders\.orderless_notification_rate must be a probability"):
        Profile.parse({"orders": {"orderless_notification_rate": rate}})


def test_orderless_notifications_are_drawn_after_every_order_and_name_no_order_of_the_workload() -> None:
    plain = make_workload(200, Profile(), random.Random(5), T0)
    profile = Profile.parse({"orders": {"orderless_notification_rate": 0.1}})
    workload = make_workload(200, profile, random.Random(5), T0)
    orderless = [a for a in workload.arrivals if a.order_id and a.order_id not in workload.orders]
    assert 5 < len(orderless) == workload.orderless_notifications < 40
    assert all(a.kind == "notification" and a.message.subject == "PaymentNotification" for a in orderless)
    assert all(json.loads(a.message.body)["orderId"] == a.order_id for a in orderless)
    assert [a for a in workload.arrivals if a not in orderless] == plain.arrivals  # the rest as without them
    assert workload.orders == plain.orders


def test_a_run_with_orderless_notifications_has_their_discards_checked() -> None:
    """Each orderless notification is told (``PaymentWithoutOrder``), discarded by the operator, dead-lettered
    ``DiscardedByOperator``, and the answer checked: every invariant holds."""
    profile = Profile.parse(
        {
            "orders": {"orderless_notification_rate": 0.3},
            "operator": {"after_s": [60, 300], "discard_orderless": True},
            "settings": BOUND,
        }
    )
    result = run_simulation(SimulationConfig(orders=10, seed=2, profile=profile))
    report = build_report(result)
    sent = result.workload.orderless_notifications
    assert sent > 0 and report["injected_faults"]["orderless_notifications"] == sent
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]
    assert report["operator_actions"]["discard"] == {"done": sent}
    assert report["operator_answers_checked"] == {"discard": sent}
    assert report["alerts"]["PaymentWithoutOrder"] == sent
    dead = [d for d in result.broker.dead_letters("orders") if d.reason == "DiscardedByOperator"]
    assert len(dead) == sent


def test_the_run_waits_for_a_discarded_message_the_peek_sweep_still_owes_to_dead_letter() -> None:
    """A discard answered 200 ``deadLettered: false`` leaves its message deferred for the peek sweep to dead-letter as
    recorded (docs/deferral.md): the operator stays busy, so the run does not end before the promise can be checked;
    once the message is dead-lettered, it is not."""
    broker = InProcessBroker(SimpleNamespace(now=lambda: T0))
    broker.declare_queue(ORDERS_QUEUE)
    broker.declare_queue(OPERATOR_ALERTS_QUEUE)
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=json.dumps(ORPHAN), message_id="pay-ghost"))
    message = broker.receive(ORDERS_QUEUE)
    assert message is not None
    broker.actions.defer(message)
    seq = int(message.sequence_number)
    alert = {"type": "OperatorAlert", "kind": "PaymentWithoutOrder", "orderId": "ord-ghost"}
    broker.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(json.dumps({**alert, "details": {"sequenceNumber": seq}}), "a"))
    host: Any = _Host(_answer(200, action="discard", entry={"notificationId": "pay-ghost"}, deadLettered=False))
    host.broker = broker

    plan = OperatorPlan(after_s=(0, 0), discard_orderless=True)
    operator = Operator(plan, random.Random(1), host, discards=random.Random(2))
    operator.read_alerts(T0)
    operator.act(T0)  # sends the discard
    operator.act(T0)  # takes its answer
    [kept] = operator.answers
    assert (kept.action, kept.status, kept.sequence_number, kept.notification_id) == ("discard", 200, seq, "pay-ghost")
    assert operator.busy()  # its message still deferred: the sweep owes its dead-lettering
    with broker.deferred_store.open(ORDERS_QUEUE) as receiver:
        [fetched] = receiver.receive_deferred([seq])
        receiver.dead_letter(fetched, "DiscardedByOperator", "as recorded")
    assert not operator.busy()


def test_without_an_operator_the_orderless_payments_wait_told_and_no_invariant_counts_them() -> None:
    """The payments nobody discards stay deferred, each named by its ``PaymentWithoutOrder`` alert: neither
    ``unmatched_notifications`` nor ``stranded_messages`` counts them, and no order is lost for them (they name no
    order of the workload)."""
    profile = Profile.parse({"orders": {"orderless_notification_rate": 0.3}, "settings": BOUND})
    result = run_simulation(SimulationConfig(orders=10, seed=2, profile=profile))
    report = build_report(result)
    sent = result.workload.orderless_notifications
    assert sent > 0 and report["alerts"]["PaymentWithoutOrder"] == sent
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]
    waiting = [
        m for m in result.broker.contents(ORDERS_QUEUE) if json.loads(m.body)["orderId"].startswith("orderless-")
    ]
    assert len(waiting) == sent and "operator_actions" not in report
    # a run cut before the alerts: each one waiting untold is stranded, as before the knob
    cut = build_report(
        run_simulation(SimulationConfig(orders=10, seed=2, profile=profile, horizon=timedelta(minutes=20)))
    )
    assert cut["invariants"]["stranded_messages"] == sent
