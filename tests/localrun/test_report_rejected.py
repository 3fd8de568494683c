"""The runner's ``lost`` evidence for refused orders: an order is rejected (not lost) when its submitter
was told ``Rejected``, or when the app alerted ``OrderRejected`` for it and its submitter's status queue
is unreachable for good (deleted, the app's role removed, and alerted ``ReplyQueueUnavailable``; the app met that
refusal for the order: ``_unreachable_orders``, which hands over order ids): that
status cannot arrive, and the queue's alert stands in for it, as it does for ``missing_statuses``.
Found by a mix of admission caps with a submitter's queue refusing the app to the end: every order that
submitter sent after the refusal began and that was refused counted as lost."""

from __future__ import annotations

from typing import Any

from localrun.report import _rejected_orders

VALID = {
    "told": {"replyTo": "q1"},
    "gone": {"replyTo": "q2"},
    "reachable": {"replyTo": "q1"},
}


def _alert(order_id: str, kind: str = "OrderRejected") -> dict[str, Any]:
    return {"type": "OperatorAlert", "kind": kind, "orderId": order_id}


def test_a_refused_order_of_an_unreachable_submitter_is_rejected_by_its_alert() -> None:
    statuses = [{"orderId": "told", "status": "Rejected", "_queue": "q1"}]
    alerts = [_alert("told"), _alert("gone"), _alert("reachable")]
    assert _rejected_orders(statuses, alerts, VALID, {"gone"}) == {"told", "gone"}


def test_an_alert_alone_does_not_stand_in_for_a_status_its_submitter_could_get() -> None:
    alerts = [_alert("gone"), _alert("reachable"), _alert("gone", "RetriesExhausted"), {"kind": "OrderRejected"}]
    assert _rejected_orders([], alerts, VALID, set()) == set()
    assert _rejected_orders([], [_alert("gone", "RetriesExhausted")], VALID, {"gone"}) == set()


def test_a_refused_order_whose_rejected_was_given_up_on_a_full_queue_is_rejected() -> None:
    """Fuzzed profile (seed 1065: a pending cap, submitter 1's queue full for good): a refused order's ``Rejected``
    was given up after its six hours (``StatusUndelivered`` while the queue refused) and the order counted as lost
    (15 of 300). The give-up stands in for the status, with the ``OrderRejected`` alert; either alone does not."""
    given_up = {("gone", "Rejected"), ("reachable", "Completed")}
    alerts = [_alert("gone"), _alert("reachable")]
    assert _rejected_orders([], alerts, VALID, set(), given_up) == {"gone"}
    assert _rejected_orders([], [], VALID, set(), given_up) == set()
