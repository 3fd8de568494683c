"""The runner's ``statuses_before_received``: an accepted order's submitter must hear ``Received`` before any
other status of the order (``Rejected`` aside: a refusal of an earlier submission, told before the accepted
one). Read from the submitters' queues in broker enqueue order; an order that never heard ``Received`` is
counted here only when ``missing_statuses`` does not count it already."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from localrun.report import _statuses_before_received

T0 = datetime(2026, 3, 1, tzinfo=UTC)
VALID = {order: {"replyTo": "q1"} for order in ("a", "b", "c", "d", "e")}
ACCEPTED: dict[str, Any] = {order: {} for order in VALID}
_seq = iter(range(1, 1000))


def _status(order_id: str, status: str, seconds: float, queue: str = "q1") -> dict[str, Any]:
    return {
        "orderId": order_id,
        "status": status,
        "_queue": queue,
        "_enqueued": (T0 + timedelta(seconds=seconds), next(_seq)),
    }


def test_a_status_enqueued_before_the_first_received_is_counted() -> None:
    statuses = [
        _status("a", "Received", 1),
        _status("a", "Processing", 2),
        _status("a", "Completed", 3),
        _status("b", "Failed", 5),
        _status("b", "Received", 6),
        _status("b", "Received", 1),  # a second Received after the Failed does not make it first
        _status("c", "Rejected", 0),  # an earlier submission's refusal: not counted
        _status("c", "Received", 1),
        _status("c", "Completed", 2),
    ]
    assert _statuses_before_received(statuses, ACCEPTED, VALID, set()) == []
    late = [_status("b", "Failed", 5), _status("b", "Received", 6), _status("b", "Processing", 4)]
    found = _statuses_before_received(late, ACCEPTED, VALID, set())
    assert len(found) == 1 and found[0].startswith("b: Processing, Failed before Received"), found


def test_the_same_instant_is_ordered_by_sequence_number() -> None:
    early = [_status("a", "Completed", 3), _status("a", "Received", 3)]
    assert _statuses_before_received(early, ACCEPTED, VALID, set()) == [
        "a: Completed before Received at 2026-03-01 00:00:03+00:00"
    ]
    in_order = [_status("a", "Received", 3), _status("a", "Completed", 3)]
    assert _statuses_before_received(in_order, ACCEPTED, VALID, set()) == []


def test_no_received_at_all_is_counted_unless_missing_statuses_counts_it() -> None:
    statuses = [_status("d", "Processing", 1), _status("e", "Failed", 1)]
    assert len(_statuses_before_received(statuses, ACCEPTED, VALID, set())) == 2
    assert _statuses_before_received(statuses, ACCEPTED, VALID, {"e"}) == ["d: Processing with no Received"]


def test_only_accepted_orders_on_their_own_queue_count() -> None:
    statuses = [_status("a", "Failed", 1, queue="q2"), _status("z", "Failed", 1)]
    assert _statuses_before_received(statuses, ACCEPTED, VALID | {"z": {"replyTo": "q1"}}, set()) == []
    assert _statuses_before_received([_status("a", "Failed", 1)], {}, VALID, set()) == []
