"""Pure rules: what a payment notification means for its order, and the deferral document."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.mapping import to_document
from contracts.messages import PaymentNotification
from domain import transitions
from domain.deferral import (
    ENTRY_LIMIT,
    RETRY_CLOCK_TOLERANCE,
    WAITING_LIMIT,
    DeferralDocument,
    DeferralReason,
    DeferredEntry,
    EntryStatus,
    TooManyWaiting,
    accepted,
    rejected,
    retry_not_for_now,
    with_entry,
    with_status,
)
from domain.payments import (
    CONFLICTING_NOTIFICATION,
    decide_payment,
    notification_digest,
    received,
    waiting_instance,
    with_payment,
)
from domain.records import StepState
from domain.states import ProcessState, StepStatus

NOW = datetime(2026, 3, 1, tzinfo=UTC)
ORDER: dict[str, Any] = {"orderId": "p1", "totalCents": 2500, "currency": "EUR", "prepaid": True}


def note(**changes: Any) -> PaymentNotification:
    fields: dict[str, Any] = {
        "type": "PaymentNotification",
        "schema_version": 1,
        "notification_id": "n-1",
        "order_id": "p1",
        "amount_cents": 2500,
        "currency": "EUR",
        "provider_reference": "psp-1",
    }
    return PaymentNotification(**{**fields, **changes})


def record(state: ProcessState = ProcessState.PENDING) -> Any:
    return replace(transitions.new_record("p1", None, NOW), process_state=state)


def test_a_matching_notification_for_an_open_prepaid_order_is_applied():
    for state in (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.ERROR):
        assert decide_payment(record(state), ORDER, note()).kind == "apply"


@pytest.mark.parametrize(
    ("order", "changes", "state", "reason"),
    [
        (ORDER, {"amount_cents": 2499}, ProcessState.PENDING, "PaymentAmountMismatch"),
        (ORDER, {"currency": "USD"}, ProcessState.PENDING, "PaymentAmountMismatch"),
        ({**ORDER, "prepaid": False}, {}, ProcessState.PENDING, "OrderNotPrepaid"),
        (ORDER, {}, ProcessState.COMPENSATED, "OrderClosed"),
        (ORDER, {}, ProcessState.PROCESSED, "OrderClosed"),
    ],
)
def test_a_notification_that_cannot_be_used_is_rejected_with_a_reason(order, changes, state, reason):
    decision = decide_payment(record(state), order, note(**changes))
    assert (decision.kind, decision.reason) == ("reject", reason)
    assert "p1" in decision.description


def test_the_same_notification_twice_is_a_duplicate_and_another_one_is_a_second_payment():
    paid = with_payment(record(), received(note(), 4, NOW), NOW)
    assert decide_payment(paid, ORDER, note()).kind == "duplicate"
    assert decide_payment(paid, ORDER, note(notification_id="n-2")).reason == "PaymentAlreadyReceived"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"amount_cents": 250000}, "amountCents"),
        ({"currency": "USD"}, "currency"),
        ({"provider_reference": "psp-2"}, "providerReference"),
    ],
)
def test_the_applied_notification_id_saying_something_else_is_a_conflict_not_a_duplicate(changes, field):
    paid = with_payment(record(), received(note(), 4, NOW), NOW)
    decision = decide_payment(paid, ORDER, note(**changes))
    assert (decision.kind, decision.reason) == ("reject", CONFLICTING_NOTIFICATION)
    assert field in decision.description and "n-1" in decision.description
    assert list(decision.details["differences"]) == [field]
    assert decision.details["applied"]["sequenceNumber"] == 4
    # a conflict even on a closed order: it says what it is before the order's state is looked at
    closed = replace(paid, process_state=ProcessState.PROCESSED)
    assert decide_payment(closed, ORDER, note(**changes)).reason == CONFLICTING_NOTIFICATION


def test_a_notification_has_one_digest_for_what_it_says_and_its_applied_payment_the_same():
    assert notification_digest(note()) == notification_digest(received(note(), 4, NOW))
    others = [note(notification_id="n-2"), note(amount_cents=1), note(currency="USD"), note(provider_reference="x")]
    assert len({notification_digest(n) for n in [note(), *others]}) == 5


def test_an_entry_carries_its_own_notification_and_an_old_entry_any_under_its_id():
    digest = notification_digest(note())
    new = replace(entry(5), notification_id="n-1", notification_digest=digest)
    assert new.carries("n-1", digest)
    assert not new.carries("n-1", notification_digest(note(provider_reference="psp-2")))
    assert not new.carries("n-2", digest)
    old = replace(entry(5), notification_id="n-1")  # recorded before digests were kept: its id alone
    assert old.carries("n-1", "anything") and not old.carries("n-2", digest)
    assert not entry(5).carries("", "")  # an entry recorded without a notification carries none


def test_applying_a_payment_changes_nothing_but_the_payment_and_the_history():
    before = replace(record(ProcessState.PROCESSING), locked_by="p1:1", attempt=1)
    after = with_payment(before, received(note(), 4, NOW), NOW + timedelta(seconds=1))
    assert after.payment is not None and after.payment.sequence_number == 4
    assert (after.process_state, after.locked_by, after.attempt) == (ProcessState.PROCESSING, "p1:1", 1)
    assert after.history[-1].event == "PaymentNotified"


def test_only_an_in_flight_payment_step_is_waiting():
    base = replace(record(ProcessState.PROCESSING), locked_by="p1:1")
    step = StepState(status=StepStatus.IN_PROGRESS, agent="payment", request_id="r", attempt=1, started_at=NOW)
    waiting = replace(base, current_step="charge-payment", steps={"charge-payment": step})
    assert waiting_instance(waiting) == "p1:1"
    assert waiting_instance(base) is None  # between steps
    other = replace(base, current_step="reserve-inventory", steps={"reserve-inventory": step})
    assert waiting_instance(other) is None
    assert waiting_instance(replace(waiting, process_state=ProcessState.PENDING, locked_by=None)) is None


def entry(seq: int, status: EntryStatus = EntryStatus.DEFERRED) -> DeferredEntry:
    return DeferredEntry(
        sequence_number=seq,
        message_id=f"m{seq}",
        message_type="PaymentNotification",
        reason=DeferralReason.ORDER_NOT_SUBMITTED,
        deferred_at=NOW,
        recorded_by="submission",
        status=status,
        updated_at=NOW,
    )


def test_recording_a_sequence_number_twice_keeps_one_entry_and_a_resolved_one_stays_resolved():
    doc = with_entry(DeferralDocument.empty("p1", NOW), entry(5), NOW)
    again = with_entry(doc, replace(entry(5), reason=DeferralReason.DEPENDENCY_UNAVAILABLE), NOW)
    assert [(e.sequence_number, e.reason) for e in again.entries] == [(5, DeferralReason.DEPENDENCY_UNAVAILABLE)]
    applied = with_status(again, 5, EntryStatus.APPLIED, NOW)
    kept = with_entry(applied, entry(5), NOW).entry(5)
    assert kept is not None and kept.status is EntryStatus.APPLIED
    assert applied.waiting() == []
    assert with_status(applied, 99, EntryStatus.EXPIRED, NOW) == applied


def test_the_document_keeps_every_waiting_entry_and_drops_the_oldest_resolved_ones():
    doc = DeferralDocument.empty("p1", NOW)
    for seq in range(ENTRY_LIMIT):  # the first WAITING_LIMIT - 1 waiting, every other one resolved
        doc = with_entry(doc, entry(seq, EntryStatus.DEFERRED if seq < WAITING_LIMIT - 1 else EntryStatus.APPLIED), NOW)
    doc = with_entry(doc, entry(1000), NOW)
    assert len(doc.entries) == ENTRY_LIMIT
    assert doc.entry(WAITING_LIMIT - 1) is None  # the oldest resolved one went
    assert len(doc.waiting()) == WAITING_LIMIT


def test_a_new_waiting_entry_past_the_limit_is_refused_and_one_already_tracked_is_not():
    doc = DeferralDocument.empty("p1", NOW)
    for seq in range(WAITING_LIMIT):
        doc = with_entry(doc, entry(seq), NOW)
    with pytest.raises(TooManyWaiting, match="order p1"):
        with_entry(doc, entry(WAITING_LIMIT), NOW)
    assert with_entry(doc, entry(3), NOW).entries == doc.entries  # the same message recorded again
    resolved = with_status(doc, 3, EntryStatus.APPLIED, NOW)
    assert with_entry(resolved, entry(WAITING_LIMIT), NOW).entry(WAITING_LIMIT) is not None  # room again


def test_the_document_is_stored_without_a_process_state():
    stored = to_document(DeferralDocument.empty("p1", NOW))
    assert stored["id"] == "deferred:p1" and stored["orderId"] == "p1"
    assert "processState" not in stored


DELAY = timedelta(seconds=30)


def round_entry(rounds: int, due: datetime | None) -> DeferredEntry:
    return replace(entry(5), reason=DeferralReason.DEPENDENCY_UNAVAILABLE, rounds=rounds, retry_due_at=due)


def test_a_retry_is_for_now_only_for_the_round_scheduled_once_due_or_the_round_before():
    due = NOW + DELAY
    scheduled = round_entry(2, due)
    assert retry_not_for_now(scheduled, 2, due, DELAY) is None
    assert retry_not_for_now(scheduled, 2, due - RETRY_CLOCK_TOLERANCE, DELAY) is None  # clocks a little apart
    early = retry_not_for_now(scheduled, 2, due - RETRY_CLOCK_TOLERANCE - timedelta(microseconds=1), DELAY)
    assert early is not None and "not due" in early
    assert retry_not_for_now(scheduled, 1, NOW, DELAY) is None  # the round before: it moves nothing on
    for stale in (3, 1000):
        reason = retry_not_for_now(scheduled, stale, due, DELAY)
        assert reason is not None and "not the round scheduled" in reason


def test_an_entry_recorded_before_due_times_were_kept_is_due_a_retry_delay_after_its_last_change():
    old = replace(round_entry(1, None), updated_at=NOW)
    assert old.retry_due(DELAY) == NOW + DELAY
    assert retry_not_for_now(old, 1, NOW, DELAY) is not None
    assert retry_not_for_now(old, 1, NOW + DELAY, DELAY) is None


def test_recording_the_same_round_again_keeps_its_due_time_and_a_new_round_takes_its_own():
    doc = with_entry(DeferralDocument.empty("p1", NOW), round_entry(1, NOW + DELAY), NOW)
    later = NOW + timedelta(seconds=10)
    again = with_entry(doc, round_entry(1, later + DELAY), later).entry(5)
    assert again is not None and again.retry_due_at == NOW + DELAY
    following = with_entry(doc, round_entry(2, later + DELAY), later).entry(5)
    assert following is not None and following.retry_due_at == later + DELAY
    waiting = with_entry(doc, replace(entry(5), rounds=0), later).entry(5)  # back to waiting for its order
    assert waiting is not None and waiting.retry_due_at is None


def test_an_entry_keeps_the_token_it_was_first_recorded_with_and_takes_only_retries_carrying_it():
    first = replace(round_entry(1, NOW + DELAY), retry_token="t-1")
    doc = with_entry(DeferralDocument.empty("p1", NOW), first, NOW)
    kept = with_entry(doc, replace(round_entry(2, NOW + 2 * DELAY), retry_token="t-2"), NOW).entry(5)
    assert kept is not None and (kept.rounds, kept.retry_token) == (2, "t-1")
    assert kept.issued("t-1") and not kept.issued("t-2") and not kept.issued(None)
    old = round_entry(1, None)  # recorded before tokens were kept: any retry, as then
    assert old.issued(None) and old.issued("anything")


def test_a_refusal_names_the_message_refused_and_an_acceptance_withdraws_it():
    """The pending cap's refusal names the OrderSubmitted by its sequence number as sent (a copy's is its
    original's): that message handled again finishes the refusal, any other is judged afresh."""
    doc = rejected(DeferralDocument.empty("p1", NOW), NOW, 42)
    assert doc.rejected_at == NOW and doc.refuses(42)
    assert not doc.refuses(43) and not doc.refuses(None)
    later = NOW + timedelta(seconds=10)
    assert rejected(doc, later, 42) == doc  # the same refusal finished again: unchanged, rejectedAt the first
    again = rejected(doc, later, 43)  # another submission refused: it is the one named now
    assert (again.rejected_at, again.refuses(43), again.refuses(42)) == (later, True, False)
    assert again.was_refused(42) and again.refused_before == [42]  # refused before: still never accepted
    withdrawn = accepted(again, later)
    assert withdrawn.rejected_at is None and not withdrawn.refuses(43)
    assert withdrawn.was_refused(43) and withdrawn.was_refused(42) and not withdrawn.was_refused(44)
    assert accepted(withdrawn, NOW + timedelta(minutes=1)) == withdrawn  # nothing to withdraw: unchanged
    stored_before = replace(doc, rejected_sequence_number=None)  # a refusal recorded before they were named
    assert not stored_before.refuses(42) and not stored_before.refuses(None)
