"""Red team (session 64): two operators (or one operator's two tabs) acting on the same order at about the same time,
through the real Functions runtime and the Cosmos protocol server. Both requests read the record before either
writes (``SlowReads``: every state read parks its invocation for a simulated second), then the conditional write
decides. Each pair is checked for what each answer promises (docs/design.md, ``operator_answers_broken``): one
write per action taken, each event logged once, and a loser told 409 with why (or 200 ``repeated`` for the same
action by the same operator)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.compensation import claim_compensation
from domain.deferral import DISCARDED
from domain.records import StateRecord
from domain.review import REVIEW_ANSWERED
from domain.states import ProcessState
from localrun.worker.http import HttpAnswer
from tests.operations.harness import (
    OpsHarness,
    easy_auth_header,
    first_review,
    paused_for_review,
    post_at_once,
)
from tests.operations.test_action_lost_response import _lose_next_response
from tests.operations.test_concurrent_operator_actions import SlowReads
from tests.operations.test_discard_orderless_payment import GHOST, NOTIFICATION, discard_path

pytestmark = pytest.mark.cosmos

ALICE, BOB = "alice@contoso.example", "bob@contoso.example"
EVENTS = {"resubmit": "OperatorResubmitted", "cancel": "OperatorCancelled", "compensate": "OperatorCompensated"}


def _events(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    names = set(EVENTS.values()) | {"OperatorActionRepeated"}
    return [(r.__dict__["event"], r.__dict__["operator"]) for r in caplog.records if r.__dict__.get("event") in names]


def _body(answer: HttpAnswer) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(answer.body)
    return loaded


@pytest.fixture
def slow(easy_auth: OpsHarness) -> SlowReads:
    assert easy_auth.ctx is not None
    made = SlowReads(easy_auth.ctx.states, easy_auth)
    easy_auth.change_context(states=made)
    return made


def test_a_resubmit_then_a_cancel_at_once_both_come_true_in_that_order(
    easy_auth: OpsHarness, slow: SlowReads, caplog: pytest.LogCaptureFixture
) -> None:
    """The cancel loses the write race, is judged again on the resubmitted (``Pending``) order and cancels it: both
    are true (the resubmit left ``Pending``, by the cancel), each written and logged once."""
    before = easy_auth.error("o-rc")
    with caplog.at_level(logging.INFO, logger="orders"):
        resubmitted, cancelled = post_at_once(
            easy_auth, [(ALICE, "resubmit", {"reason": "retry"}), (BOB, "cancel", {"reason": "withdrawn"})], "o-rc"
        )
    assert slow.reads >= 3
    assert (resubmitted.status, cancelled.status) == (200, 200), (resubmitted.body, cancelled.body)
    assert _body(cancelled)["order"]["processState"] == "Compensating"
    record = slow.get("o-rc")
    assert record is not None and record.process_state.value == "Compensating"
    added = [(h.event, h.by) for h in record.history[len(before.history) :]]
    assert added[:2] == [("Resubmitted", ALICE), ("CompensationRequested", BOB)], added
    assert _events(caplog) == [("OperatorResubmitted", ALICE), ("OperatorCancelled", BOB)]


@pytest.mark.parametrize(
    ("first", "second", "why"),
    [
        ("cancel", "resubmit", "only an Error record can be resubmitted"),
        # both leave ``CompensationRequested``: the cancel judged again must not take the compensate for itself
        ("compensate", "cancel", "nothing to cancel"),
    ],
)
def test_of_two_actions_at_once_the_second_is_refused_saying_why(
    easy_auth: OpsHarness, slow: SlowReads, caplog: pytest.LogCaptureFixture, first: str, second: str, why: str
) -> None:
    before = easy_auth.error("o-two")
    with caplog.at_level(logging.INFO, logger="orders"):
        won, lost = post_at_once(easy_auth, [(ALICE, first, {"reason": "a"}), (BOB, second, {"reason": "a"})], "o-two")
    assert won.status == 200, won.body
    assert lost.status == 409 and why in _body(lost)["error"], lost.body
    assert "was taken" not in _body(lost)["error"]
    record = slow.get("o-two")
    assert record is not None
    assert [(h.event, h.by) for h in record.history[len(before.history) :]] == [("CompensationRequested", ALICE)]
    assert _events(caplog) == [(EVENTS[first], ALICE)]


@pytest.mark.parametrize("reason", ["same", "another"])
@pytest.mark.parametrize("action", sorted(EVENTS))
def test_one_operators_same_action_from_two_tabs_is_taken_once(
    easy_auth: OpsHarness, slow: SlowReads, caplog: pytest.LogCaptureFixture, action: str, reason: str
) -> None:
    """The same reason: the second is 200 ``repeated``. Another reason is another action (it would be recorded
    nowhere): 409, not ``repeated``. Either way one write and one event of the action."""
    order_id = f"o-tabs-{action}-{reason}"
    before = easy_auth.error(order_id)
    with caplog.at_level(logging.INFO, logger="orders"):
        first, second = post_at_once(
            easy_auth, [(ALICE, action, {"reason": "same"}), (ALICE, action, {"reason": reason})], order_id
        )
    assert first.status == 200 and "repeated" not in _body(first), first.body
    record = slow.get(order_id)
    assert record is not None and len(record.history) == len(before.history) + 1
    if reason == "same":
        assert (second.status, _body(second).get("repeated")) == (200, True), second.body
        assert _events(caplog) == [(EVENTS[action], ALICE), ("OperatorActionRepeated", ALICE)]
    else:
        assert second.status == 409, second.body
        assert _events(caplog) == [(EVENTS[action], ALICE)]


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    """A high-value order paused for review (a day), served as on App Service: two operators can sign in."""
    made = paused_for_review(cosmos_db, "o-rv2", "86400", WEBSITE_AUTH_ENABLED="True", WEBSITE_SITE_NAME="orders-app")
    yield made
    made.close()


class TimedReads(SlowReads):
    """``SlowReads`` whose n-th read parks for ``delays[n]`` simulated seconds (1 past the list)."""

    def __init__(self, store: Any, harness: OpsHarness, delays: list[float]) -> None:
        super().__init__(store, harness)
        self._delays = delays

    def get(self, order_id: str) -> StateRecord | None:
        found: StateRecord | None = self._store.get(order_id)
        delay = self._delays[self.reads] if self.reads < len(self._delays) else 1.0
        self.reads += 1
        self._harness.clock.sleep(delay)
        return found


def _settled(made: OpsHarness, slow: SlowReads) -> StateRecord:
    """The record once the attempt, the supervisor and the compensation round have run (the store fast again)."""
    assert made.ctx is not None
    made.change_context(states=slow._store)
    made.host.run_until(made.clock.now() + timedelta(minutes=10))
    made.run_until_idle()
    final = made.ctx.states.get("o-rv2")
    assert final is not None
    return final


@pytest.mark.parametrize("decision", ["retry", "fail", "compensate"])
def test_a_review_answer_and_a_cancel_at_once_the_answer_that_loses_says_the_order_is_compensating(
    paused: OpsHarness, decision: str
) -> None:
    """Both read the paused record; the cancel (one read) writes first, so the answer's note finds the order
    compensating: 409 saying so, nothing noted, and the order ends compensated."""
    assert paused.ctx is not None
    slow = SlowReads(paused.ctx.states, paused)
    paused.change_context(states=slow)
    answer = (ALICE, "review", {"reviewId": first_review("o-rv2"), "action": decision, "reason": "looked"})
    reviewed, cancelled = post_at_once(paused, [answer, (BOB, "cancel", {"reason": "withdrawn"})], "o-rv2")

    assert cancelled.status == 200, cancelled.body
    assert reviewed.status == 409 and "is Compensating and does not wait" in _body(reviewed)["error"], reviewed.body
    final = _settled(paused, slow)
    assert final.process_state is ProcessState.COMPENSATED, [(h.event, h.by) for h in final.history]
    assert not any(h.event == REVIEW_ANSWERED for h in final.history)


@pytest.mark.parametrize("decision", ["retry", "alternative", "fail", "compensate"])
def test_a_cancel_that_read_before_a_review_answer_was_noted_is_judged_on_what_the_answer_did(
    paused: OpsHarness, decision: str
) -> None:
    """The cancel reads the paused record, then the answer is noted and acted on before the cancel writes: its write
    meets a 412 and it is judged again on the record the answer left. A ``compensate`` answer already compensates:
    the cancel is 409 "nothing to cancel"; otherwise it is taken (the order moved on after the note, as the answer's
    200 promises). Either way one compensation, and the order ends compensated."""
    assert paused.ctx is not None
    slow = TimedReads(paused.ctx.states, paused, [1.0, 5.0])  # the cancel's read parks 5 s
    paused.change_context(states=slow)
    answer = (ALICE, "review", {"reviewId": first_review("o-rv2"), "action": decision, "reason": "looked"})
    reviewed, cancelled = post_at_once(paused, [answer, (BOB, "cancel", {"reason": "withdrawn"})], "o-rv2")

    assert reviewed.status == 200, reviewed.body
    if decision == "compensate":
        assert cancelled.status == 409 and "nothing to cancel" in _body(cancelled)["error"], cancelled.body
    else:
        assert cancelled.status == 200, cancelled.body
    final = _settled(paused, slow)
    events = [(h.event, h.by) for h in final.history]
    assert final.process_state is ProcessState.COMPENSATED, events
    assert (REVIEW_ANSWERED, ALICE) in events
    assert [e for e in events if e[0] == "CompensationClaimed"] == [("CompensationClaimed", "supervisor")], events


@pytest.mark.parametrize(("second", "reason"), [(ALICE, "refunded"), (BOB, "refunded"), (ALICE, "another")])
def test_two_discards_of_one_payment_at_once_write_and_log_it_once(
    easy_auth: OpsHarness, caplog: pytest.LogCaptureFixture, second: str, reason: str
) -> None:
    """Both requests read the entry waiting before either writes. FINDING (fails on 864cc64): the same discard from
    two tabs was 200 twice, neither ``repeated``, ``DeferredDiscarded`` logged twice, and the second said
    ``deadLettered: false`` (the peek sweep to dead-letter it) of a message the first had dead-lettered: its write found
    the entry already discarded as it would write it and went on as if it had written it. Now the second is 200
    ``repeated`` (``OperatorActionRepeated``), as resubmit, cancel and compensate answer a double click. Another
    operator's, or another reason, is 409 naming the discard taken."""

    assert easy_auth.ctx is not None
    easy_auth.send(ORDERS_QUEUE, json.dumps(NOTIFICATION), "n-ghost")
    easy_auth.run_until_idle()
    [seq] = [m.sequence_number for m in easy_auth.broker.peek(ORDERS_QUEUE, 10) if m.state.name == "DEFERRED"]
    slow = SlowReads(easy_auth.ctx.deferrals, easy_auth)  # the deferral document's reads, this time
    easy_auth.change_context(deferrals=slow)
    action = discard_path(seq).removeprefix(f"/api/ops/orders/{GHOST}/")
    with caplog.at_level(logging.INFO, logger="orders"):
        answers = post_at_once(
            easy_auth, [(ALICE, action, {"reason": "refunded"}), (second, action, {"reason": reason})], GHOST
        )
    logged = [
        (r.__dict__["event"], r.__dict__.get("operator"), r.__dict__.get("action"))
        for r in caplog.records
        if getattr(r, "event", None) in ("DeferredDiscarded", "OperatorActionRepeated")
    ]

    assert slow.reads >= 2
    [dead] = easy_auth.broker.dead_letters(ORDERS_QUEUE)
    assert dead.reason == DISCARDED and "alice@contoso.example: refunded" in str(dead.description)
    taken = [a for a in answers if a.status == 200 and not _body(a).get("repeated")]
    assert len(taken) == 1 and _body(taken[0])["deadLettered"] is True, [a.body[:300] for a in answers]
    [other] = [a for a in answers if a is not taken[0]]
    if (second, reason) == (ALICE, "refunded"):
        assert (other.status, _body(other).get("repeated")) == (200, True), other.body
        assert _body(other)["entry"]["discardedBy"] == ALICE
        assert logged == [("DeferredDiscarded", ALICE, None), ("OperatorActionRepeated", ALICE, "discard")], logged
    else:
        assert other.status == 409, other.body
        assert "discarded by operator alice@contoso.example: refunded" in _body(other)["error"], other.body
        assert logged == [("DeferredDiscarded", ALICE, None)], logged


def _as(operator: str) -> dict[str, str]:
    return {"x-ms-client-principal": easy_auth_header(operator, ("Orders.Read", "Orders.Operate"))}


def test_a_resubmit_whose_answer_was_lost_then_cancelled_by_another_says_it_was_taken(
    easy_auth: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alice's resubmit lands but its answer and its read-back are lost (503: post it again); Bob cancels the
    resubmitted order (200). Alice posts the same resubmit again: 409, it is no longer the order's latest move. FINDING
    (fails on 864cc64): the 409 said only "only an Error record can be resubmitted", so Alice took her resubmit for
    not taken; it now says hers was taken, when, and that the order moved on since."""

    easy_auth.error("o-lost-rs")
    lost = _lose_next_response(easy_auth, monkeypatch, reads_fail=True)
    status, _ = easy_auth.post("/api/ops/orders/o-lost-rs/resubmit", {"reason": "retry"}, _as(ALICE))
    assert status == 503 and lost[0] == "Resubmitted"
    monkeypatch.undo()
    status, body = easy_auth.post("/api/ops/orders/o-lost-rs/cancel", {"reason": "withdrawn"}, _as(BOB))
    assert status == 200, body

    status, body = easy_auth.post("/api/ops/orders/o-lost-rs/resubmit", {"reason": "retry"}, _as(ALICE))

    assert status == 409, body
    assert "only an Error record can be resubmitted" in body["error"], body
    assert "your resubmit with this reason was taken at" in body["error"], body
    assert "Compensating" in body["error"], body
    # another reason, or another operator: nothing of theirs was taken, the refusal says only why
    for operator, reason in ((ALICE, "another"), (BOB, "retry")):
        status, body = easy_auth.post("/api/ops/orders/o-lost-rs/resubmit", {"reason": reason}, _as(operator))
        assert status == 409 and "was taken" not in body["error"], body


def test_a_compensate_whose_answer_was_lost_then_moved_on_says_it_was_taken(
    easy_auth: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above for a compensate whose round the supervisor claimed before it was posted again (README: 409 once the
    order moved on); a cancel's ``CompensationRequested`` is never taken for it."""

    assert easy_auth.ctx is not None
    easy_auth.error("o-lost-cp")
    lost = _lose_next_response(easy_auth, monkeypatch, reads_fail=True)
    status, _ = easy_auth.post("/api/ops/orders/o-lost-cp/compensate", {"reason": "undo"}, _as(ALICE))
    assert status == 503 and lost[0] == "CompensationRequested"
    monkeypatch.undo()
    record = easy_auth.ctx.states.get("o-lost-cp")
    assert record is not None
    easy_auth.ctx.states.replace(
        claim_compensation(record, easy_auth.clock.now(), timedelta(minutes=5), 3, "supervisor")
    )

    status, body = easy_auth.post("/api/ops/orders/o-lost-cp/compensate", {"reason": "undo"}, _as(ALICE))

    assert status == 409, body
    assert "your compensate with this reason was taken at" in body["error"], body
    status, body = easy_auth.post("/api/ops/orders/o-lost-cp/compensate", {"reason": "undo"}, _as(BOB))
    assert status == 409 and "was taken" not in body["error"], body
    status, body = easy_auth.post("/api/ops/orders/o-lost-cp/cancel", {"reason": "undo"}, _as(ALICE))
    assert status == 409 and "nothing to cancel" in body["error"], body
