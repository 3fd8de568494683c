"""Two operators acting on the same order at the same moment, through the real Functions runtime: both
requests read the record before either writes (every state read of the app parks its invocation for a
simulated second, so the two interleave), then the conditional write decides. One wins (200); the other
is 409 saying why the order no longer allows its action, and the record carries one action, never two."""

from __future__ import annotations

import json
from typing import Any

import pytest

from domain.records import StateRecord
from localrun.worker.http import HttpAnswer
from tests.operations.harness import OpsHarness, post_at_once

pytestmark = pytest.mark.cosmos


class SlowReads:
    """The app's state store, each ``get`` taking a simulated second: an invocation that reads parks,
    and the other one runs meanwhile."""

    def __init__(self, store: Any, harness: OpsHarness) -> None:
        self._store = store
        self._harness = harness
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def get(self, order_id: str) -> StateRecord | None:
        found: StateRecord | None = self._store.get(order_id)
        self.reads += 1
        self._harness.clock.sleep(1.0)
        return found


def _at_once(harness: OpsHarness, posts: list[tuple[str, str]], order_id: str) -> list[HttpAnswer]:
    """``posts`` (operator, action) on ``order_id``, handed to the host together, answered in order."""
    return post_at_once(harness, [(who, action, {"reason": f"{action} by {who}"}) for who, action in posts], order_id)


# the second action's refusal, once the first one has moved the order out of Error
WHY = {
    "resubmit": "only an Error record can be resubmitted",
    "compensate": "an operator compensates only an Error or CompensationFailed order",
    "cancel": "nothing to cancel",
}
LEAVES = {"resubmit": ("Resubmitted", "Pending"), "compensate": ("CompensationRequested", "Compensating")}
LEAVES["cancel"] = LEAVES["compensate"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("resubmit", "resubmit"),
        ("compensate", "compensate"),
        ("cancel", "cancel"),
        ("resubmit", "compensate"),
        ("compensate", "resubmit"),
        ("cancel", "compensate"),
    ],
)
def test_of_two_operators_acting_at_once_one_wins_and_the_other_is_told_why(
    easy_auth: OpsHarness, first: str, second: str
) -> None:
    """The compensate cases found by the red team (session 32) on 36c310f: a compensate that lost the race
    was 409 "changed while you acted: reload it and try again" (it did not read the record again to say
    why, as resubmit and cancel do)."""
    assert easy_auth.ctx is not None
    before = easy_auth.error("o-race")
    slow = SlowReads(easy_auth.ctx.states, easy_auth)
    easy_auth.change_context(states=slow)

    won, lost = _at_once(easy_auth, [("alice@contoso.example", first), ("bob@contoso.example", second)], "o-race")

    assert slow.reads >= 3, "the two requests did not both read before writing"
    assert won.status == 200, won.body[:300]
    assert lost.status == 409, lost.body[:300]
    assert WHY[second] in json.loads(lost.body)["error"], lost.body[:300]
    record = slow.get("o-race")
    assert record is not None
    event, state = LEAVES[first]
    assert record.process_state.value == state
    added = record.history[len(before.history) :]
    assert [(h.event, h.by) for h in added] == [(event, "alice@contoso.example")], added
