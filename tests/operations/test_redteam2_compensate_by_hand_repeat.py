"""Red team 2 (compensation by hand): a compensate posted again with other ``undoneByHand`` entries was "repeated".

The operator posted compensate without ``undoneByHand``, then (the order not claimed yet) posted it again with the
same reason and the refund they made by hand in ``undoneByHand``. The record's latest move was their compensate, so
the second post was taken for the first posted again: 200 ``repeated``, nothing written, the entry still ``Failed``.
The next round sent the refused refund again, refused again, the order back ``CompensationFailed``, while the
operator's answer said their word had been taken. Now a post is the same one posted again only if every entry it
names was undone by hand by that operator; else 409 (the order is no longer ``CompensationFailed``), nothing
written. Through the real Functions runtime and the Cosmos protocol server."""

from __future__ import annotations

import pytest

from tests.operations.harness import OpsHarness
from tests.operations.test_redteam_compensate_undone_by_hand import _refund_refused

pytestmark = pytest.mark.cosmos

URL = "/api/ops/orders/o-again/compensate"


def test_a_compensate_posted_again_with_entries_undone_by_hand_is_not_taken_as_repeated(ops: OpsHarness):
    _refund_refused(ops, "o-again")
    status, body = ops.post(URL, {"reason": "refund by hand"})
    assert status == 200 and body["order"]["processState"] == "Compensating", body
    assert ops.ctx is not None
    before = ops.ctx.states.get("o-again")
    status, body = ops.post(URL, {"reason": "refund by hand", "undoneByHand": [2]})
    assert status == 409 and "undoneByHand" in body["error"] and "2" in body["error"], body
    after = ops.ctx.states.get("o-again")
    assert after is not None and before is not None
    assert after.version == before.version
    assert [e.undone_by for e in after.compensation] == [None, None]


def test_the_same_compensate_with_its_entries_posted_again_is_still_repeated(ops: OpsHarness):
    _refund_refused(ops, "o-again")
    assert ops.post(URL, {"reason": "refund by hand", "undoneByHand": [2]})[0] == 200
    # its answer lost: posted again with the entries, or without them (nothing more to say), taken already
    for body in ({"reason": "refund by hand", "undoneByHand": [2]}, {"reason": "refund by hand"}):
        status, answer = ops.post(URL, body)
        assert status == 200 and answer.get("repeated") is True, answer
