"""Red team (fence41). ``fail_compensation`` numbers two different writes the same (its round's release to wait
the outage out, ``OutageWait``, or ``CompensationFailed``). A run of it again after its first run released the
round and the next round claimed the record (a retry after a lost answer, or a late second run) finds its write
made (``WriteAlreadyMade``) under the ``CompensationFailed`` hand-over's name and answered "done": an operator was
paged ``CompensationFailed`` and the round went on to tell the submitter ``CompensationFailed`` for an order the
next round is compensating. With the circuit closed (an undo alone in an outage) the next round is due at once."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import update_once
from contracts.activities import NOT_OWNED, OWNED, Owned, tries_used_up
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.states import ProcessState
from supervisor.compensation_rounds import claim_due_compensations
from supervisor.operator import compensate_action
from tests.supervisor.test_outage_wait import health, with_health
from tests.supervisor.test_undo_tries_used_up_in_an_outage import _alerts, _fail, _failed_calls, _undoing_the_charge

pytestmark = pytest.mark.cosmos
__all__ = ["health"]  # the fixture, used by the tests below


def test_the_release_run_again_after_the_next_round_claimed_the_record_is_not_a_failed_compensation(
    make_ctx: Any, health: Any, states: Any, clock: Any, sender: Any
) -> None:
    ctx = with_health(make_ctx, health, MAX_FAILURES="1", CIRCUIT_FAILURE_THRESHOLD="8")
    record = _undoing_the_charge(ctx, states, clock)
    _failed_calls(ctx, "payment", 3)
    error = tries_used_up("payment unavailable (503)", 1)
    assert _fail(ctx, record, error) == NOT_OWNED  # released: the round waits the outage out
    released = states.get("o1")
    assert released.locked_by is None and released.complete_by is not None
    clock.set(released.complete_by)
    [_next] = claim_due_compensations(ctx).starts  # the next round holds the record
    taken = states.get("o1")
    assert taken.locked_by not in (None, record.locked_by)

    assert _fail(ctx, record, error) == NOT_OWNED  # the first round's fail_compensation, run again

    after = states.get("o1")
    assert (after.process_state, after.locked_by) == (ProcessState.COMPENSATING, taken.locked_by)
    assert "CompensationFailed" not in _alerts(sender)  # no operator paged for a compensation still going on


def test_an_undo_failing_past_max_outage_wait_says_the_bound_failed_it(
    make_ctx: Any, health: Any, states: Any, clock: Any, sender: Any
) -> None:
    """An undo alone in an outage that waited ``MAX_OUTAGE_WAIT_MINUTES`` fails the compensation. Its reason was the
    undo's error alone, where the supervisor's escalations by the bound say so (``escalation_reason``): the operator
    paged could not tell the outage alone failed it, and the runner counted the order an outage-only failure
    (``outage_only_failures``; see ``tests/localrun/test_redteam41_undo_alone_in_an_outage.py``)."""
    ctx = with_health(make_ctx, health, MAX_FAILURES="1", CIRCUIT_FAILURE_THRESHOLD="8", MAX_OUTAGE_WAIT_MINUTES="10")
    record = _undoing_the_charge(ctx, states, clock)
    waiting_since = clock.now() - timedelta(minutes=11)
    record = update_once(states, record, lambda r: replace(r, outage_wait_since=waiting_since))
    _failed_calls(ctx, "payment", 3)

    assert _fail(ctx, record, tries_used_up("payment unavailable (503)", 1)) == OWNED

    failed = states.get("o1")
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    assert "MAX_OUTAGE_WAIT_MINUTES=10" in (failed.last_error or ""), failed.last_error
    [alert] = [a for a in sender.bodies(OPERATOR_ALERTS_QUEUE) if a["kind"] == "CompensationFailed"]
    assert "MAX_OUTAGE_WAIT_MINUTES=10" in alert["details"]["reason"]


def test_fail_compensation_run_again_after_an_operator_compensated_again_pages_nobody(
    make_ctx: Any, health: Any, states: Any, clock: Any, sender: Any
) -> None:
    """``fail_compensation`` (the ``CompensationFailed`` hand-over) run again after an operator ran compensate again
    and the next round claimed the record: its write is made (answered done), but it paged ``CompensationFailed`` a
    second time under the next round's number (``record.attempt``, a new MessageId) with that round's reason, and
    answered plain "owned": the round told the submitter ``CompensationFailed`` for an order being compensated."""
    ctx = with_health(make_ctx, health)
    record = _undoing_the_charge(ctx, states, clock)
    assert _fail(ctx, record, "refund refused: charge disputed") == OWNED  # its answer lost: run again
    clock.advance(timedelta(minutes=5))
    compensate_action(ctx, "o1", "ana", "dispute settled")
    [_next] = claim_due_compensations(ctx).starts
    taken = states.get("o1")
    assert taken.locked_by not in (None, record.locked_by)
    paged = len(sender.bodies(OPERATOR_ALERTS_QUEUE))

    answer = _fail(ctx, record, "refund refused: charge disputed")

    assert sender.bodies(OPERATOR_ALERTS_QUEUE)[paged:] == []  # no second CompensationFailed
    assert answer == Owned(moved_on=True)  # done; the round tells the submitter nothing
    after = states.get("o1")
    assert (after.version, after.locked_by) == (taken.version, taken.locked_by)
