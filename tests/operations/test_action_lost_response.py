"""Operator actions (resubmit, cancel, compensate) whose Cosmos DB write commits but whose response is
lost (a timeout, a reset connection: ``StoreUnavailable``), through the real runtime (``OpsHarness``).

The write is read back (``update_once_or_reread``, as the review answer's note is): the action landed,
so the operator is answered 200, its own event is logged once and the cached counts are bumped once.
The same action posted again by the same operator (as after an error, or a double click), found as the
record's latest history entry, is answered 200 with the record and ``repeated: true``: nothing is
written and its event is not logged twice. A write that did not land, or a read-back that fails too,
is still 503, and the repeat then tells the operator the action was taken."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

import pytest

from adapters.cosmos.errors import StoreUnavailable
from domain.compensation import claim_compensation, finish_compensation
from domain.records import StateRecord
from domain.states import ProcessState
from tests.operations.harness import OpsHarness

pytestmark = pytest.mark.cosmos

REASON = {"reason": "customer called"}
ACTIONS: dict[str, tuple[Callable[[OpsHarness, str], StateRecord], ProcessState, str, ProcessState | None]] = {
    # action: (the record it acts on, the state it leaves, its event, the state whose count it bumps)
    "cancel": (OpsHarness.processing, ProcessState.COMPENSATING, "OperatorCancelled", ProcessState.PROCESSING),
    "resubmit": (OpsHarness.error, ProcessState.PENDING, "OperatorResubmitted", ProcessState.PENDING),
    "compensate": (OpsHarness.error, ProcessState.COMPENSATING, "OperatorCompensated", None),
}


def _lose_next_response(ops: OpsHarness, monkeypatch: pytest.MonkeyPatch, *, reads_fail: bool = False) -> list[str]:
    """The next replace commits, then raises ``StoreUnavailable`` (its response lost); with
    ``reads_fail`` the read-back right after it fails too. Returns the history events so written."""
    assert ops.ctx is not None
    store = ops.ctx.states
    real_replace, real_get = store.replace, store.get
    lost: list[str] = []

    def replace(record: StateRecord) -> StateRecord:
        written = real_replace(record)
        if not lost:
            lost.append(record.history[-1].event)
            raise StoreUnavailable("Cosmos DB 408: the response was lost after the write committed")
        return written

    def get(order_id: str) -> StateRecord | None:
        if reads_fail and len(lost) == 1:
            lost.append("read-back failed")
            raise StoreUnavailable("Cosmos DB 503: unavailable")
        return real_get(order_id)

    monkeypatch.setattr(store, "replace", replace)
    monkeypatch.setattr(store, "get", get)
    return lost


def _spy(ops: OpsHarness, monkeypatch: pytest.MonkeyPatch) -> list[tuple[ProcessState, int]]:
    assert ops.ctx is not None
    counts = ops.ctx.counts
    real = counts.bump
    bumps: list[tuple[ProcessState, int]] = []

    def bump(state: ProcessState, delta: int) -> None:
        bumps.append((state, delta))
        real(state, delta)

    monkeypatch.setattr(counts, "bump", bump)
    return bumps


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_action_whose_response_is_lost_is_answered_taken_and_logged_once(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, action: str
) -> None:
    assert ops.ctx is not None
    make, expected, event, counted = ACTIONS[action]
    order_id = f"o-lost-{action}"
    make(ops, order_id)
    bumps = _spy(ops, monkeypatch)
    lost = _lose_next_response(ops, monkeypatch)
    with caplog.at_level(logging.INFO, logger="orders"):
        status, body = ops.post(f"/api/ops/orders/{order_id}/{action}", REASON)
        assert lost, "nothing was written"
        assert (status, body["action"]) == (200, action), body
        assert body["order"]["processState"] == expected.value
        assert "repeated" not in body
        again_status, again = ops.post(f"/api/ops/orders/{order_id}/{action}", REASON)
    assert (again_status, again.get("repeated")) == (200, True), again
    record = ops.ctx.states.get(order_id)
    assert record is not None and record.process_state is expected
    assert [h.event for h in record.history].count(lost[0]) == 1  # written once
    assert len(_events(caplog, event)) == 1
    assert len(_events(caplog, "WriteConfirmed")) == 1
    assert [r.__dict__["action"] for r in _events(caplog, "OperatorActionRepeated")] == [action]
    if counted is not None:
        assert len([b for b in bumps if b[0] is counted]) == 1


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_action_whose_read_back_fails_too_is_503_then_200_when_posted_again(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    make, expected, _event, _counted = ACTIONS[action]
    order_id = f"o-unknown-{action}"
    make(ops, order_id)
    lost = _lose_next_response(ops, monkeypatch, reads_fail=True)
    status, _body = ops.post(f"/api/ops/orders/{order_id}/{action}", REASON)
    assert status == 503 and lost == [lost[0], "read-back failed"]
    again_status, again = ops.post(f"/api/ops/orders/{order_id}/{action}", REASON)
    assert (again_status, again.get("repeated")) == (200, True), again
    assert again["order"]["processState"] == expected.value


def test_another_action_or_another_cancel_is_still_refused(ops: OpsHarness) -> None:
    assert ops.ctx is not None
    ops.processing("o-twice")
    assert ops.post("/api/ops/orders/o-twice/cancel", REASON)[0] == 200
    status, body = ops.post("/api/ops/orders/o-twice/compensate", REASON)  # a cancel is not a compensate
    assert status == 409, body
    status, body = ops.post("/api/ops/orders/o-twice/cancel", {"reason": "another reason"})
    assert status == 409 and "nothing to cancel" in body["error"], body


def test_a_cancel_posted_again_after_its_compensation_moved_on_is_answered_taken(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel's answer lost (503), its compensation round claimed and finished before the operator posts it again:
    the cancel is no longer the record's latest move, but an order never leaves compensation once it entered it, so
    the cancel in its history is this one: 200 ``repeated``, nothing written. Before, the repeat was refused (409
    "nothing to cancel") and the operator could not tell whether the cancel had been taken."""
    assert ops.ctx is not None
    ops.processing("o-moved")
    lost = _lose_next_response(ops, monkeypatch, reads_fail=True)
    assert ops.post("/api/ops/orders/o-moved/cancel", REASON)[0] == 503 and lost[0] == "CompensationRequested"
    record = ops.ctx.states.get("o-moved")
    assert record is not None and record.process_state is ProcessState.COMPENSATING
    now = ops.clock.now()
    claimed = ops.ctx.states.replace(claim_compensation(record, now, timedelta(minutes=5), 3, "supervisor"))
    finished = ops.ctx.states.replace(finish_compensation(claimed, str(claimed.locked_by), now))
    assert finished.process_state is ProcessState.COMPENSATED

    status, body = ops.post("/api/ops/orders/o-moved/cancel", REASON)

    assert (status, body.get("repeated")) == (200, True), body
    assert body["order"]["processState"] == "Compensated"
    after = ops.ctx.states.get("o-moved")
    assert after is not None and after.history == finished.history
