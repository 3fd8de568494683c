"""A state record stays one Cosmos DB item (2 MB at most, measured on the JSON the service receives:
learn.microsoft.com/azure/cosmos-db/concepts-limits, "Per-item limits") however long the errors its history
notes. An agent's reply may carry an error of up to a reply's 64 KB; every failure of the attempt copied it
whole into a history entry twice (``StepTransientFailure``, then the supervisor's ``RetryScheduled`` or
``Escalated``), and the SDK sends a character past ASCII escaped (an emoji: 12 bytes for its 4;
Azure/azure-sdk-for-python#48914). After one resubmit the record passed 2 MB: every later write of it was a
413 on Azure (an error the store does not map), so the order could never move again, while the local
protocol server stored it (it now refuses it as Azure does: ``localrun/cosmos_guards.cjs``). A history
entry's detail is cut (``domain.records.DETAIL_LIMIT``): 50 of them fit whatever they say."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import update_fenced, update_once
from contracts.names import STATE_CONTAINER
from contracts.parsing import MAX_BODY_BYTES
from domain import transitions
from domain.states import ProcessState

pytestmark = pytest.mark.cosmos
GRACE = timedelta(seconds=60)
MAX_FAILURES = 3
# an error as long as a reply can carry it: 16,000 emoji, 64,000 bytes of UTF-8
LONG_ERROR = "\U0001f600" * 16_000


def test_the_longest_error_a_reply_carries_fits_in_one() -> None:
    reply = {"type": "AgentReply", "outcome": "failed", "transient": True, "error": LONG_ERROR}
    assert len(json.dumps(reply, ensure_ascii=False).encode()) < MAX_BODY_BYTES


def _fail_once(ctx: Any, clock: Any) -> Any:
    """One attempt claimed, its step started, released by the agent's long transient error, and retried
    (or escalated) by the supervisor."""
    record = update_once(ctx.states, ctx.states.get("o1"), lambda r: transitions.claim(r, clock.now(), GRACE))
    owner = str(record.locked_by)
    deadline = clock.now() + timedelta(minutes=5)
    update_fenced(
        ctx.states,
        "o1",
        owner,
        lambda r: transitions.begin_step(r, owner, "reserve-inventory", "inventory", "q", deadline, clock.now()),
    )
    update_fenced(
        ctx.states,
        "o1",
        owner,
        lambda r: transitions.release_for_retry(r, owner, "reserve-inventory", LONG_ERROR, clock.now(), GRACE),
    )
    clock.advance(GRACE)
    retried = update_once(
        ctx.states,
        ctx.states.get("o1"),
        lambda r: transitions.supervisor_retry(r, owner, clock.now(), MAX_FAILURES, timedelta(seconds=10), grace=GRACE),
    )
    clock.advance(timedelta(seconds=10))
    return retried


def test_an_order_failing_with_the_longest_errors_is_still_written_after_resubmits(
    app_context: Any, cosmos_db: Any, clock: Any
) -> None:
    app_context.states.create(transitions.new_record("o1", None, clock.now()))
    for _ in range(3):  # three rounds of MAX_FAILURES attempts, an operator's resubmit after each
        for _ in range(MAX_FAILURES):
            record = _fail_once(app_context, clock)
        assert record.process_state is ProcessState.ERROR
        update_once(app_context.states, record, lambda r: transitions.resubmit(r, "op", "try again", clock.now()))
    stored = cosmos_db.get_container_client(STATE_CONTAINER).read_item("o1", partition_key="o1")
    assert len(json.dumps(stored)) < 2 * 1024 * 1024 // 2  # half an item at most: room for the results
