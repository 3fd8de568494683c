"""The errors a state record keeps (``lastError``, a step's ``error``, a compensation entry's ``error``) are cut
to ``domain.records.ERROR_LIMIT`` characters however the record is built (a move, ``dataclasses.replace``, a
document read): an agent's reply may carry an error of 64 KB, and the record is one Cosmos DB item
(tests/adapters/test_record_fits_an_item.py). What the app reads in one comes first and stays."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from adapters.cosmos.mapping import from_document, to_document
from domain import compensation, transitions
from domain.records import ERROR_LIMIT, StateRecord
from domain.states import ProcessState, StepStatus

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
LONG = "\U0001f600" * 20_000


def _charging() -> tuple[StateRecord, str]:
    record = transitions.claim(transitions.new_record("o1", None, NOW), NOW, timedelta(seconds=60))
    owner = str(record.locked_by)
    record = transitions.begin_step(record, owner, "reserve-inventory", "inventory", "q1", NOW, NOW)
    record = compensation.complete_step_logged(record, owner, "reserve-inventory", {"reservationId": "r"}, NOW, NOW)
    return transitions.begin_step(record, owner, "charge-payment", "payment", "q2", NOW, NOW), owner


def test_a_failure_keeps_the_head_of_a_long_error() -> None:
    record, owner = _charging()
    failed = transitions.fail(record, owner, "charge-payment", "charge-payment: declined " + LONG, NOW)
    assert failed.last_error is not None and len(failed.last_error) == ERROR_LIMIT
    assert failed.last_error.startswith("charge-payment: declined \U0001f600")
    assert failed.steps["charge-payment"].error == failed.last_error
    assert from_document(StateRecord, to_document(failed)) == failed


def test_an_undo_failure_keeps_the_head_of_a_long_error() -> None:
    record, owner = _charging()
    record = compensation.enter_compensation(record, "op", "cancelled", NOW, owner=owner, failed_step="charge-payment")
    record = compensation.claim_compensation(record, NOW, timedelta(seconds=60), 3, "supervisor")
    round_owner = str(record.locked_by)
    failed = compensation.fail_compensation(record, round_owner, 1, LONG, NOW)
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    assert failed.compensation[0].error == LONG[:ERROR_LIMIT]
    assert failed.last_error is not None and failed.last_error.startswith("entry 1 (release of reserve-inventory")
    assert len(failed.last_error) == ERROR_LIMIT


def test_any_copy_is_cut_and_a_short_error_is_kept_whole() -> None:
    record, _ = _charging()
    assert replace(record, last_error=LONG).last_error == LONG[:ERROR_LIMIT]
    step = replace(record.steps["charge-payment"], status=StepStatus.FAILED, error="x" * ERROR_LIMIT)
    assert step.error == "x" * ERROR_LIMIT
