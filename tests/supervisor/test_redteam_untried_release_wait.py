"""Red team of the release of rounds never tried (``release_untried``): a slow Cosmos DB under a stalled extension.

The supervisor's trigger waits for a batch's compensation starts on its event loop within a bound made for the starts
alone: what is left of the batch's start grace, a wave more, and a margin (``supervisor/blueprint.py``: ``max(grace,
DURABLE_CALL_TIMEOUT) + 2 x DURABLE_CALL_TIMEOUT``). The release of the rounds whose start was never tried, a store
write each, ran inside that waited coroutine after the starts: a Cosmos DB throttling those writes (429s, the SDK
waiting each ``retry-after``) ran the wait out although every start had been made. The run then logged
``SupervisorPhaseFailed`` for its compensation starts (the ``supervisorFailing`` rule pages), cancelled the coroutine,
and the releases went on in a thread of their own after the trigger had moved on (the last one still unwritten when
the run ended). The releases are now written by the run's own thread once the starts' wait is over, as its claims
are: no phase failure, each round released before the run goes on.

The stall is a client whose starts never answer, through the trigger's own ``bounded_client``, the bound shortened
(the trigger's wait too); the slow store is the Cosmos DB protocol server answering the releases' replaces 429 with a
``retry-after``, which the real SDK waits out."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from azure.functions.timer import TimerRequest

import dependencies
import supervisor.backend_wait
import supervisor.blueprint
from adapters import durable_client
from contracts.names import STATE_CONTAINER
from domain.compensation import ROUND_NOT_TRIED, compensation_instance_id
from domain.states import ProcessState
from supervisor.scan import ScanState
from tests.supervisor.test_redteam46_timer_budgets import StalledClient, handed_over

pytestmark = pytest.mark.cosmos

BOUND = 0.6  # DURABLE_CALL_TIMEOUT for the test, the trigger's wait included: its margin is 2 x BOUND = 1.2 s
ROUNDS = 10  # a wave of PARALLEL_CALLS (8) is tried; the 2 after it are not, the batch's time for starts spent
THROTTLED = 3  # 429s answered to each release's replace, each waited out ``RETRY_AFTER_MS``: 2.1 s a release
RETRY_AFTER_MS = 700


def _events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_releases_a_slow_store_writes_are_not_a_failed_start_phase_and_end_within_the_run(
    functions, make_ctx, states, clock, cosmos_faults, monkeypatch, caplog
):
    for module in (durable_client, supervisor.backend_wait, supervisor.blueprint):
        monkeypatch.setattr(module, "DURABLE_CALL_TIMEOUT", timedelta(seconds=BOUND))
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    monkeypatch.setattr(supervisor.blueprint, "watch_dead_letters", lambda *_: None)
    orders = [f"undo{i:02}" for i in range(ROUNDS)]
    for order in orders:
        handed_over(states, order, clock)  # Compensating, unowned, due: its round 2 to claim

    class SlowStoreOnceStarting(StalledClient):
        """At the batch's first start (every round of it claimed by then), Cosmos DB starts throttling the state
        records' replaces: only the releases of the rounds never tried write them after that."""

        async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
            if not self.starts:
                rule = {"op": "replace", "container": STATE_CONTAINER, "status": 429, "retryAfterMs": RETRY_AFTER_MS}
                cosmos_faults.set_faults([{**rule, "partitionKey": o, "times": THROTTLED} for o in orders])
            return await super().start_new(name, instance_id, client_input)

    stalled = SlowStoreOnceStarting()
    dependencies.use_context(make_ctx(START_GRACE_SECONDS="1", SUPERVISOR_MAX_RECORDS=str(ROUNDS + 2)))
    try:
        user = functions["supervisor"].func
        trigger = getattr(user, "client_function", None) or user.__wrapped__
        with caplog.at_level(logging.INFO):
            asyncio.run(trigger(timer=TimerRequest(past_due=False), client=stalled))
    finally:
        dependencies.use_context(None)

    tried = {instance.split(":")[0] for instance in stalled.starts}
    untried = [order for order in orders if order not in tried]
    assert len(tried) == 8 and len(untried) == ROUNDS - 8
    # the starts were all made in time; nothing of the run failed, nothing pages
    assert [r.getMessage() for r in _events(caplog, "SupervisorPhaseFailed")] == []
    # each round never tried is released by the time the run ends, through the throttling
    released = sorted(str(r.__dict__["instanceId"]) for r in _events(caplog, "CompensationStartReleased"))
    assert released == [compensation_instance_id(order, 2) for order in untried]
    for order in untried:
        record = states.get(order)
        assert record is not None and record.process_state is ProcessState.COMPENSATING
        assert record.locked_by is None and record.history[-1].event == ROUND_NOT_TRIED
        assert (record.failure_count, record.starts_missed) == (0, 0)
