"""The runner's host renews the lock of a Service Bus-triggered invocation's message while it runs, as the
Functions host does (``localrun.host.LockRenewals``): ``RENEW_BUFFER`` before the lock runs out, up to
host.json's ``maxAutoLockRenewalDuration`` from receipt. Before, nothing renewed it: a handler that ran
longer than the queue's 60 s lock had its message delivered to a second handler while it still ran, which
the real host prevents. Past the renewal window the lock is lost as in Azure, and the fault
``servicebus.lock_expiry_rate`` (a stall in which the renewal fails) still hands the message to a second
handler."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import timedelta

import pytest

from contracts.names import ORDERS_QUEUE, QUEUE_MAX_DELIVERY_COUNT
from localrun.host import host_json, timespan
from localrun.hostile import LockStalls
from tests.fakes import SlowStore
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

WINDOW = timespan(host_json()["extensions"]["serviceBus"]["maxAutoLockRenewalDuration"])


@pytest.fixture
def harness(cosmos_db) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    try:
        yield made
    finally:
        made.close()


def _submit_one(harness: RuntimeHarness, handler_seconds: float) -> None:
    assert harness.ctx is not None
    harness.change_context(states=SlowStore(harness.ctx.states, harness.clock.sleep, handler_seconds, calls=1))
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId="ord-slow")), "ord-slow")
    harness.run_until_idle(limit=timedelta(minutes=30))


def test_the_window_is_host_jsons(harness):
    assert harness.host.lock_renewals.window == WINDOW
    assert timedelta(minutes=5) == WINDOW


def test_a_handler_running_three_minutes_keeps_its_lock_and_is_delivered_once(harness):
    _submit_one(harness, 180)

    assert harness.host.executions["submit_order"] == 1
    counters = harness.broker.counters(ORDERS_QUEUE)
    assert counters.lock_renewals == 3  # at 50, 100 and 150 s: each 10 s before the lock would run out
    assert counters.completed == 1
    assert harness.host.lock_renewals.failed == 0


def test_a_handler_running_past_the_renewal_window_loses_its_lock(harness):
    # renewed until maxAutoLockRenewalDuration (the last at 4:10, to 5:10); then the lock runs out
    _submit_one(harness, WINDOW.total_seconds() + 60)

    assert harness.host.executions["submit_order"] == 2
    counters = harness.broker.counters(ORDERS_QUEUE)
    assert counters.lock_renewals == 5
    assert counters.completed == 1  # by the second handler; the first one's settlement finds its lock lost


def test_lock_expiry_rate_still_stalls_a_handler_past_its_lock(harness):
    """The fault's stall is one the renewal does not survive: the message goes to a second handler."""
    harness.host.lock_stalls = LockStalls(1.0, random.Random(1), harness.clock.sleep)
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId="ord-stall")), "ord-stall")
    harness.run_until_idle(limit=timedelta(minutes=30))

    assert harness.host.executions["submit_order"] == QUEUE_MAX_DELIVERY_COUNT  # every delivery stalled
    assert harness.host.lock_stalls.injected == QUEUE_MAX_DELIVERY_COUNT
    assert harness.host.lock_renewals.failed == QUEUE_MAX_DELIVERY_COUNT
    assert harness.broker.counters(ORDERS_QUEUE).lock_renewals == 0
