"""``domain.compensation.uncaptured_prepayment``: a prepaid order's payment (its notification applied)
that no undo returned. Decided by what each undo of the payment step answered (``record_undo`` keeps it
on the entry as ``undo_result``), never by the entries' existence: ``enter_compensation`` logs
unknown-outcome entries for any payment step that started, captured or not."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from domain import compensation as c
from domain import transitions as t
from domain.records import CompensationEntry, PaymentReceived, StateRecord, StepState
from domain.states import StepStatus
from domain.workflow import prepaid_step

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
PAID = PaymentReceived(
    notification_id="pay-o-1", amount_cents=1000, currency="EUR", provider_reference="psp-1", received_at=NOW
)
PAYMENT_STEP = prepaid_step().name


def _compensating(*, paid: bool = True, payment_started: bool = True) -> tuple[StateRecord, str]:
    """A prepaid order cancelled while its payment step is in flight (or before it began), claimed by
    compensation round 2; and that round's owner."""
    record = t.claim(t.new_record("o-1", None, NOW), NOW, GRACE)
    if payment_started:
        steps = dict(record.steps)
        steps[PAYMENT_STEP] = StepState(
            status=StepStatus.IN_PROGRESS, agent="payment", request_id="o-1:1:charge", attempt=1, started_at=NOW
        )
        record = replace(record, steps=steps, current_step=PAYMENT_STEP)
    if paid:
        record = replace(record, payment=PAID)
    entered = c.enter_compensation(record, "client", "changed my mind", NOW)
    claimed = c.claim_compensation(entered, NOW, GRACE, 3, "supervisor")
    assert claimed.locked_by is not None
    return claimed, claimed.locked_by


def _undo_all(record: StateRecord, owner: str, answers: dict[str, Any]) -> StateRecord:
    """Every entry undone, each with ``answers[agent]`` as its undo's answer."""
    for entry in record.compensation:
        record = c.record_undo(record, owner, entry.seq, NOW + GRACE, NOW, answers.get(entry.agent))
    return record


def test_unknown_outcome_entries_whose_undos_refunded_nothing_leave_the_prepayment_to_release() -> None:
    record, owner = _compensating()
    assert sorted(e.agent for e in record.compensation) == ["payment", "payment-backup"]
    nothing = {"refundId": None, "amountCents": 0}
    done = _undo_all(record, owner, {"payment": nothing, "payment-backup": nothing})
    assert [e.undo_result for e in done.compensation] == [nothing, nothing]
    assert c.uncaptured_prepayment(done) == PAID


def test_a_refund_by_any_payment_agent_means_the_capture_was_returned() -> None:
    record, owner = _compensating()
    answers = {
        "payment": {"refundId": None, "amountCents": 0},
        "payment-backup": {"refundId": "rf-1", "amountCents": 1000},
    }
    assert c.uncaptured_prepayment(_undo_all(record, owner, answers)) is None


def test_the_kept_answer_is_the_steps_undo_result_fields_only() -> None:
    record, owner = _compensating()
    answer = {"refundId": "rf-1", "amountCents": 1000, "cardNumber": "4111"}
    done = c.record_undo(record, owner, 1, NOW + GRACE, NOW, answer)
    assert done.compensation[0].undo_result == {"refundId": "rf-1", "amountCents": 1000}
    # an entry already undone keeps its first answer
    again = c.record_undo(done, owner, 1, NOW + GRACE, NOW, {"refundId": None, "amountCents": 0})
    assert again.compensation[0].undo_result == {"refundId": "rf-1", "amountCents": 1000}


def test_no_payment_entry_leaves_the_prepayment_to_release_and_an_unpaid_order_has_none() -> None:
    record, _owner = _compensating(payment_started=False)
    assert record.compensation == []
    assert c.uncaptured_prepayment(record) == PAID
    unpaid, _ = _compensating(paid=False)
    assert c.uncaptured_prepayment(unpaid) is None


def test_an_entry_undone_before_answers_were_kept_counts_only_when_its_capture_is_on_the_record() -> None:
    record, _owner = _compensating()
    legacy = [replace(e, outcome=c.UNDONE, outcome_at=NOW, undo_result=None) for e in record.compensation]
    assert c.uncaptured_prepayment(replace(record, compensation=legacy)) == PAID  # outcome unknown: no proof
    captured = CompensationEntry(
        seq=1,
        step=PAYMENT_STEP,
        agent="payment",
        undo_action="refund",
        data={"chargeId": "cap-1", "amountCents": 1000},
        attempt=1,
        at=NOW,
        outcome=c.UNDONE,
        outcome_at=NOW,
    )
    assert c.uncaptured_prepayment(replace(record, compensation=[captured])) is None


@pytest.mark.parametrize(
    "nothing",
    [
        {"refundId": "", "amountCents": 0},  # an empty reference
        {"refundId": "  ", "amountCents": 0},
        {"refundId": False, "amountCents": 0},
        {"refundId": None, "amountCents": True},  # a bool is an int in Python: True > 0
        {"refundId": {}, "amountCents": 0},
        {"refundId": ["r-1"], "amountCents": "1000"},
    ],
)
def test_an_undo_answer_that_names_no_refund_keeps_the_prepayment_alert(nothing: dict[str, Any]) -> None:
    record, owner = _compensating()
    done = _undo_all(record, owner, {"payment": nothing, "payment-backup": nothing})
    assert c.uncaptured_prepayment(done) == PAID


def test_what_an_undo_answer_leaves_on_the_record_is_a_bounded_reference_or_a_count() -> None:
    huge = {"refundId": "r" * 200_000, "amountCents": {"nested": ["x" * 1000] * 50}, "other": "x" * 10_000}
    assert c.undo_result("charge-payment", huge) == {"refundId": "r" * c.UNDO_REFERENCE_MAX, "amountCents": None}
    assert c.undo_result("charge-payment", {"refundId": "rf-1", "amountCents": 1000}) == {
        "refundId": "rf-1",
        "amountCents": 1000,
    }
    # a count a Cosmos DB document would round (or keep as null, past a double's range) is no count: dropped
    for inexact in (2**53, -(2**53), 2**64 - 1, 10**4000):
        assert c.undo_result("charge-payment", {"refundId": "rf-1", "amountCents": inexact}) == {
            "refundId": "rf-1",
            "amountCents": None,
        }
    exact = {"refundId": "rf-1", "amountCents": 2**53 - 1}
    assert c.undo_result("charge-payment", exact) == exact
