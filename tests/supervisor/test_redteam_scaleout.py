"""Red team: the app on several instances at once (Flex Consumption scales out), each a Python process with its own
caches, over one Cosmos DB. The local runner runs one host, so a version one process keeps while another process
changes the record is never met there. Here two contexts with stores of their own (``two_writers.Run.ctx``: a
``CosmosStateStore`` each, so a cache each) run the app's own activities, operator actions and submission code as
two instances would, over the same protocol server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from activities.scheduler_steps import publish_status
from adapters.clock import ManualClock
from contracts.activities import PublishStatusInput
from contracts.messages import StatusName
from domain.states import ProcessState
from tests.orchestrators.support import sample_order
from tests.supervisor.two_writers import (
    CLIENT,
    T0,
    Run,
    Scene,
    WritersSender,
    _begin,
    _forward,
    fail,
    final,
    operator_resubmit,
    processed,
    received_mark,
    starter,
)

pytestmark = pytest.mark.cosmos


def _status(order_id: str, status: StatusName, attempt: int) -> PublishStatusInput:
    return PublishStatusInput(order_id=order_id, status=status, attempt=attempt, reply_to=CLIENT, reply_to_known=True)


@pytest.mark.parametrize("instances", ["one", "two"])
def test_a_final_status_says_the_received_the_order_owes_though_its_instance_kept_the_order_ended(
    cosmos_db: Any, instances: str
) -> None:
    """docs/deferral.md, "Status messages", Order: a status sent while the record owes ``Received`` says it first.
    Instance A sent attempt 1's ``Failed`` (``publish_status`` read the record: A's process keeps that ``Error``
    version). On instance B an operator resubmits the order, a redelivered ``OrderSubmitted`` whose ``Received`` send
    failed marks it owed, and attempt 2 runs to ``Processed`` while the submitter's queue refuses the app, the mark
    still there. ``Completed`` then goes out on the scheduler's timers, here on A: it must say ``Received`` first.
    Before, A trusted its ended version (``Error``, no mark: "a mark is never set on an ended record") and sent
    ``Completed`` alone; one instance (the local runner) holds the newest version and says it."""
    run = Run(cosmos_db, ManualClock(), f"scale-out-{instances}")
    run.clock.set(T0)
    b, b_store = run.ctx("B", 2)
    a, _ = run.ctx("A", 1, b_store._inner if instances == "one" else None)
    order_id = run.order_id
    b.orders.create_or_verify(sample_order(order_id, total_cents=1000, prepaid=True))
    scene = _forward(b, order_id)
    assert fail(b, order_id, scene).startswith("Owned")
    assert publish_status(a, _status(order_id, "Failed", 1)) is None  # A now holds the Error version

    assert operator_resubmit(b, order_id, scene) == "resubmitted"
    assert received_mark(b, order_id, scene) == "marked"
    assert starter(b, order_id, scene) == "claimed"
    claimed = final(run)
    assert claimed is not None
    owner = str(claimed.locked_by)
    assert isinstance(b.sender, WritersSender)
    refusing = replace(b, sender=b.sender.refusing(CLIENT))
    _begin(refusing, order_id, owner, "reserve-inventory", "inventory", 1, announce=True)
    processed(refusing, order_id, Scene(owner, 2))
    ended = final(run)
    assert ended is not None and ended.process_state is ProcessState.PROCESSED and ended.received_owed is not None

    run.sent.clear()
    assert publish_status(a, _status(order_id, "Completed", 2)) is None
    told = [message_id for _, queue, message_id in run.sent if queue == CLIENT]
    assert told == ["ORDER:Received:0", "ORDER:Completed:2"]
    after = final(run)
    assert after is not None and after.received_owed is None
