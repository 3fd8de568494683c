"""A Service Bus-triggered invocation that fails is abandoned by the host at once, as in Azure, whatever
``autoCompleteMessages`` says: the extension rethrows the function's failure and the SDK's processor
abandons the message unless it was settled or its lock lost (``localrun/host.py``,
``LocalHost._abandon_after_failure``, has the sources). A handler that fails on every delivery uses up the
queue's max delivery count in seconds, not one lock duration (60 s) per delivery."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE, QUEUE_LOCK_DURATION_SECONDS, QUEUE_MAX_DELIVERY_COUNT
from localrun.servicebus import MAX_DELIVERY_COUNT_EXCEEDED
from tests.runtime.harness import T0, RuntimeHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


class StateStoreWithABug:
    """Every call raises what no handler catches: the function fails, its message unsettled."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"a bug in {name}")

        return fail


@pytest.fixture
def harness(cosmos_db) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


def test_a_failing_handler_is_abandoned_at_once_and_dead_lettered_within_seconds(harness):
    harness.change_context(states=StateStoreWithABug())
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId="ord-bug")), "ord-bug")
    harness.run_until_idle(limit=timedelta(seconds=QUEUE_LOCK_DURATION_SECONDS - 1))

    assert harness.host.executions["submit_order"] == QUEUE_MAX_DELIVERY_COUNT
    [dead] = harness.broker.dead_letters(ORDERS_QUEUE)
    assert (dead.message_id, dead.reason, dead.delivery_count) == (
        "ord-bug",
        MAX_DELIVERY_COUNT_EXCEEDED,
        QUEUE_MAX_DELIVERY_COUNT,
    )
    assert dead.dead_lettered_at < T0 + timedelta(seconds=QUEUE_LOCK_DURATION_SECONDS)
    assert harness.broker.counters(ORDERS_QUEUE).abandoned == QUEUE_MAX_DELIVERY_COUNT
    assert harness.host.settlement.calls["Abandon"] == 0  # the host's own abandon, not the worker's


def test_a_handler_that_settled_before_failing_is_not_abandoned_again(harness, monkeypatch):
    """The processor skips the abandon when the function settled the message (``message.IsSettled``)."""
    import submission.blueprint

    real = submission.blueprint.apply_settlement  # type: ignore[attr-defined]

    def settle_then_fail(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        raise RuntimeError("failed after settling")

    monkeypatch.setattr(submission.blueprint, "apply_settlement", settle_then_fail)
    harness.send(ORDERS_QUEUE, b"not json", "bad-1")
    harness.run_until_idle(limit=timedelta(seconds=5))

    assert harness.host.executions["submit_order"] == 1
    assert [(d.message_id, d.reason) for d in harness.broker.dead_letters(ORDERS_QUEUE)] == [("bad-1", "NotJson")]
    assert harness.broker.counters(ORDERS_QUEUE).abandoned == 0
