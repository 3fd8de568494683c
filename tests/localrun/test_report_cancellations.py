"""``missing_statuses`` counts a client's ``CancelOrder`` the app never answered: a cancellation is either taken (the
order goes to ``Compensating`` and ends ``Compensated`` or ``CompensationFailed``) or refused with a
``CancellationRejected`` status on the order's own queue (submission/cancellation.py). Before, nothing counted a
cancellation the app dropped: its order ended ``Processed`` with ``Received`` and ``Completed`` heard, and every
invariant held (the mutant in tests/e2e/test_invariants_catch_bugs.py, the ``CancelOrder`` handler completing the
message unread). Hand-made evidence, as ``build_report`` hands it over."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from localrun.report import _unanswered_cancellations

AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
OWNERS = {o: {"replyTo": "sub-1"} for o in ("o1", "o2", "o3", "o4", "o5")}


def _status(order_id: str, status: str, queue: str = "sub-1") -> dict[str, Any]:
    return {"orderId": order_id, "status": status, "_queue": queue, "_enqueued": (AT, 1)}


def _docs(**states: str) -> dict[str, dict[str, Any]]:
    return {o: {"orderId": o, "processState": state} for o, state in states.items()}


def test_a_cancellation_neither_taken_nor_refused_is_counted() -> None:
    by_order = _docs(o1="Processed", o2="Error")
    statuses = [_status("o1", "Received"), _status("o1", "Completed"), _status("o2", "Failed")]
    found = _unanswered_cancellations(["o1", "o2"], statuses, by_order, OWNERS, set(), set(), set())
    assert found == [
        "o1: its CancelOrder neither taken nor answered CancellationRejected (ended Processed)",
        "o2: its CancelOrder neither taken nor answered CancellationRejected (ended Error)",
    ]


def test_a_cancellation_refused_on_the_orders_own_queue_or_taken_is_answered() -> None:
    by_order = _docs(o1="Processed", o2="Compensated", o3="CompensationFailed", o4="Processed", o5="Processed")
    statuses = [_status("o1", "CancellationRejected"), _status("o5", "CancellationRejected", queue="sub-2")]
    # o4 went to Compensating (taken) and on to Processed all the same: left_compensation's to count, not this
    found = _unanswered_cancellations(["o1", "o2", "o3", "o4", "o5"], statuses, by_order, OWNERS, set(), set(), {"o4"})
    assert found == ["o5: its CancelOrder neither taken nor answered CancellationRejected (ended Processed)"]


def test_an_unreachable_queue_a_status_given_up_an_unsettled_order_or_no_record_owes_nothing() -> None:
    by_order = _docs(o1="Processed", o2="Processed", o3="Processing")
    owners = {**OWNERS, "o2": {"replyTo": "sub-gone"}}
    given_up = {("o1", "CancellationRejected")}
    # o2's queue refuses the app at the end and refused its statuses (``_unreachable_orders``)
    found = _unanswered_cancellations(["o1", "o2", "o3", "o4"], [], by_order, owners, {"o2"}, given_up, set())
    assert found == []
