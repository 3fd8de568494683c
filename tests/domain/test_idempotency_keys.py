"""The rules of idempotency keys (``domain.ids``, ``domain.transitions``, ``domain.compensation``): a
step's key is the same in every attempt (a retried charge is never a second charge), and moves to its
next generation only after its provider refused it for good and a person chose to try it again (an
operator's resubmit, a review's retry): nothing happened under the old key, and the provider would answer
it with the same refusal. An undo key is the same in every round (never undone twice) and moves on only
when an operator compensates again after the provider refused the undo for good."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from domain import transitions as t
from domain.compensation import (
    FAILED,
    FORWARD_KEY_FIELD,
    UNDONE,
    complete_step_logged,
    enter_compensation,
    fail_compensation,
    renew_refused_undos,
    undo_idempotency_key,
    undo_payload,
    undo_refused,
)
from domain.ids import MAX_KEY_GENERATION, MAX_MESSAGE_ID_LENGTH, idempotency_key, key_generation
from domain.records import CompensationEntry, StateRecord
from domain.states import ProcessState, StepStatus

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
LONGEST_ORDER = "o" * 64


# --- the keys ---------------------------------------------------------------------------------------


def test_generation_0_is_the_key_every_order_had_and_later_ones_are_marked() -> None:
    assert idempotency_key("o1", "charge-payment") == idempotency_key("o1", "charge-payment", 0) == "o1:charge-payment"
    assert idempotency_key("o1", "charge-payment", 1) == "o1:charge-payment:g1"
    assert idempotency_key("o1", "charge-payment", 12) == "o1:charge-payment:g12"


@pytest.mark.parametrize("generation", [0, 1, 7, 10, MAX_KEY_GENERATION])
def test_a_key_reads_back_as_its_generation_for_its_own_order_and_step_only(generation: int) -> None:
    key = idempotency_key("o1", "charge-payment", generation)
    assert key_generation(key, "o1", "charge-payment") == generation
    assert key_generation(key, "o2", "charge-payment") is None
    assert key_generation(key, "o1", "reserve-inventory") is None
    assert key_generation(key, "o", "1:charge-payment") is None


@pytest.mark.parametrize(
    "key",
    [
        "o1:charge-payment:g0",
        "o1:charge-payment:g01",
        "o1:charge-payment:g",
        "o1:charge-payment:1",
        "o1:charge-payment:undo",
        f"o1:charge-payment:g{MAX_KEY_GENERATION + 1}",
        "o1:charge-payment:g1:undo",
        "o1:charge-payment:g-1",
    ],
)
def test_nothing_else_reads_as_a_key_of_the_step(key: str) -> None:
    assert key_generation(key, "o1", "charge-payment") is None


@pytest.mark.parametrize("generation", [-1, MAX_KEY_GENERATION + 1, True])
def test_a_generation_out_of_bounds_is_refused(generation: int) -> None:
    with pytest.raises(ValueError, match="generation"):
        idempotency_key("o1", "charge-payment", generation)
    with pytest.raises(ValueError, match="generation"):
        undo_idempotency_key("o1", "charge-payment", generation=generation)


def test_the_longest_keys_still_fit_a_message_id() -> None:
    forward = idempotency_key(LONGEST_ORDER, "reserve-inventory", MAX_KEY_GENERATION)
    undo = undo_idempotency_key(LONGEST_ORDER, "reserve-inventory", forward_key=forward, generation=MAX_KEY_GENERATION)
    assert len(undo) <= MAX_MESSAGE_ID_LENGTH


def test_the_undo_key_is_of_the_forward_key_it_fences_and_renewed_only_by_generation() -> None:
    assert undo_idempotency_key("o1", "charge-payment") == "o1:charge-payment:undo"  # every entry logged before
    assert undo_idempotency_key("o1", "charge-payment", generation=2) == "o1:charge-payment:undo:2"
    fresh = idempotency_key("o1", "charge-payment", 1)
    assert undo_idempotency_key("o1", "charge-payment", forward_key=fresh) == "o1:charge-payment:g1:undo"
    assert (
        undo_idempotency_key("o1", "charge-payment", forward_key=fresh, generation=1) == "o1:charge-payment:g1:undo:1"
    )


def test_the_undo_payload_names_the_forward_key_only_when_the_entry_keeps_one() -> None:
    assert undo_payload({"chargeId": "C-1"}, 2, None) == {"chargeId": "C-1", "seq": 2}  # as before
    assert undo_payload({"chargeId": "C-1"}, 2, "o1:charge-payment:g1") == {
        "chargeId": "C-1",
        FORWARD_KEY_FIELD: "o1:charge-payment:g1",
        "seq": 2,
    }
    unknown = {"outcomeUnknown": True, FORWARD_KEY_FIELD: "o1:charge-payment:g1"}
    assert undo_payload(unknown, 3, "o1:charge-payment:g1") == {**unknown, "seq": 3}


# --- the record's generations ---------------------------------------------------------------------------


def _begun(step: str, *, generation: int = 0, attempt: int = 1) -> StateRecord:
    record = t.claim(t.new_record("o1", None, NOW), NOW, timedelta(seconds=30))
    for _ in range(attempt - 1):
        record = replace(record, attempt=record.attempt + 1, locked_by=f"o1:{record.attempt + 1}")
    key = idempotency_key("o1", step, generation)
    return t.begin_step(record, record.locked_by or "", step, "payment", "r", NOW + timedelta(minutes=1), NOW, key=key)


def test_begin_step_keeps_the_key_of_the_call_and_a_later_generation_on_the_record() -> None:
    first = _begun("charge-payment")
    assert first.steps["charge-payment"].idempotency_key == "o1:charge-payment"
    assert first.key_generations == {}  # the first key: nothing to keep
    retried = _begun("charge-payment", generation=2)
    assert retried.steps["charge-payment"].idempotency_key == "o1:charge-payment:g2"
    assert retried.key_generations == {"charge-payment": 2}  # a later attempt resumes with it
    unsaid = t.begin_step(first, "o1:1", "charge-payment", "payment", "r2", NOW, NOW)  # an input before keys
    assert unsaid.steps["charge-payment"].idempotency_key is None and unsaid.key_generations == {}
    assert t.step_key(unsaid, "charge-payment") == "o1:charge-payment"


def test_resubmit_gives_a_fresh_key_to_a_step_refused_for_good_and_to_no_other() -> None:
    record = complete_step_logged(_begun("reserve-inventory"), "o1:1", "reserve-inventory", {}, NOW, NOW)
    record = t.begin_step(record, "o1:1", "charge-payment", "payment", "r", NOW, NOW, key="o1:charge-payment")
    failed = t.fail(record, "o1:1", "charge-payment", "charge-payment: card declined", NOW)
    again = t.resubmit(failed, "ops", "customer updated the card", NOW)
    assert again.key_generations == {"charge-payment": 1}
    assert again.history[-1].detail == "customer updated the card; a fresh idempotency key for charge-payment"
    # refused again under g1, resubmitted again: g2
    redo = t.claim(again, NOW, timedelta(seconds=30))
    redo = t.begin_step(redo, "o1:2", "charge-payment", "payment", "r", NOW, NOW, key="o1:charge-payment:g1")
    twice = t.resubmit(t.fail(redo, "o1:2", "charge-payment", "declined", NOW), "ops", "again", NOW)
    assert twice.key_generations == {"charge-payment": 2}


def test_resubmit_keeps_the_key_of_a_step_whose_outcome_is_unknown() -> None:
    record = _begun("charge-payment")
    escalated = t.supervisor_retry(record, "o1:1", NOW + timedelta(hours=1), max_failures=1, backoff=timedelta())
    assert escalated.process_state is ProcessState.ERROR
    assert escalated.steps["charge-payment"].status is StepStatus.IN_PROGRESS
    assert t.resubmit(escalated, "ops", "provider back", NOW).key_generations == {}


def test_resubmit_keeps_the_key_of_a_call_that_acted_but_whose_answer_could_not_be_carried() -> None:
    record = _begun("charge-payment")
    reason = f"charge-payment: {t.UNCARRIABLE_ANSWER}: the result is too large"
    failed = t.fail(record, "o1:1", "charge-payment", reason, NOW)
    assert t.resubmit(failed, "ops", "fixed", NOW).key_generations == {}


def test_the_next_generation_is_past_the_one_the_last_call_used() -> None:
    record = _begun("charge-payment", generation=3)
    record = replace(record, key_generations={})  # say the record lost it: the step's key still counts
    assert t.next_key_generation(record, "charge-payment") == 4


# --- what compensation fences -----------------------------------------------------------------------------


def test_a_completed_steps_log_entry_and_an_unknown_outcome_entry_keep_the_key_of_its_call() -> None:
    record = _begun("reserve-inventory", generation=1)
    done = complete_step_logged(record, "o1:1", "reserve-inventory", {"reservationId": "R-1"}, NOW, NOW)
    [entry] = done.compensation
    assert entry.forward_key == "o1:reserve-inventory:g1"
    charging = t.begin_step(done, "o1:1", "charge-payment", "payment", "r", NOW, NOW, key="o1:charge-payment:g2")
    compensating = enter_compensation(charging, "ops", "cancelled", NOW)
    unknown = [e for e in compensating.compensation if e.step == "charge-payment"]
    assert {e.agent for e in unknown} == {"payment", "payment-backup"}
    assert {(e.forward_key, e.data[FORWARD_KEY_FIELD]) for e in unknown} == {("o1:charge-payment:g2",) * 2}


def test_entries_of_steps_begun_before_keys_were_kept_fence_the_first_key() -> None:
    record = t.claim(t.new_record("o1", None, NOW), NOW, timedelta(seconds=30))
    record = t.begin_step(record, "o1:1", "charge-payment", "payment", "r", NOW, NOW)  # no key said
    [entry, _] = enter_compensation(record, "ops", "cancelled", NOW).compensation
    assert entry.forward_key is None and entry.data[FORWARD_KEY_FIELD] == "o1:charge-payment"


# --- compensate again --------------------------------------------------------------------------------------


def _entry(seq: int, **more: object) -> CompensationEntry:
    fields: dict[str, object] = {"seq": seq, "step": "charge-payment", "agent": "payment", "undo_action": "refund"}
    return CompensationEntry(**fields, data={}, attempt=1, at=NOW, **more)  # type: ignore[arg-type]


def test_an_undo_is_refused_for_good_by_what_the_round_said_or_for_older_entries_by_its_error() -> None:
    assert undo_refused(_entry(1, outcome=FAILED, error="disputed", refused=True))
    assert not undo_refused(_entry(1, outcome=FAILED, error="503 (transient; 3 tries used up)", refused=False))
    assert undo_refused(_entry(1, outcome=FAILED, error="disputed"))  # failed before ``refused`` was kept
    assert not undo_refused(_entry(1, outcome=FAILED, error="503 (transient; 3 tries used up)"))
    assert not undo_refused(_entry(1, outcome=FAILED, error="refund refused (transient; 3 tries)"))  # older text
    assert not undo_refused(_entry(1, outcome=UNDONE)) and not undo_refused(_entry(1))


def test_compensating_again_renews_only_the_undos_refused_for_good() -> None:
    refused = _entry(3, outcome=FAILED, outcome_at=NOW, error="disputed", refused=True, undo_generation=1)
    used_up = _entry(2, outcome=FAILED, error="503 (transient; 3 tries used up)", refused=False)
    done = _entry(1, outcome=UNDONE)
    renewed = renew_refused_undos([done, used_up, refused])
    assert renewed[:2] == [done, used_up]
    assert renewed[2] == replace(refused, undo_generation=2, outcome=None, outcome_at=None, error=None, refused=None)


def test_an_operators_compensate_of_a_compensation_failed_order_renews_the_refused_undo() -> None:
    record = StateRecord(
        id="o1",
        order_id="o1",
        process_state=ProcessState.COMPENSATING,
        locked_by="o1:compensate:2",
        attempt=2,
        compensation=[_entry(1)],
        updated_at=NOW,
    )
    failed = fail_compensation(record, "o1:compensate:2", 1, "disputed", NOW, transient=False)
    assert (failed.process_state, failed.compensation[0].refused) == (ProcessState.COMPENSATION_FAILED, True)
    again = enter_compensation(failed, "ops", "dispute closed", NOW)
    assert (again.compensation[0].undo_generation, again.compensation[0].outcome) == (1, None)
    # from Error (the first compensation of a forward failure) nothing is renewed
    errored = replace(failed, process_state=ProcessState.ERROR)
    assert enter_compensation(errored, "ops", "x", NOW).compensation[0].undo_generation == 0
