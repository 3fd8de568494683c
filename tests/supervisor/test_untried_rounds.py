"""A compensation round whose start the supervisor's run never tried is released by that run, at once.

The run starts each batch of rounds it claims ``PARALLEL_CALLS`` at a time within the batch's start grace
(``start_orchestrations``): against a stalled Durable extension the first wave hangs to its bound and the rounds
after it are never tried. Such a round was left claimed: a later run found it stuck after the start grace, read its
instance ``Absent`` and released it as a start the backend never had (``CompensationStartMissed``, one of the order's
``MAX_STARTS_MISSED``, then a backoff), though no start was ever sent. Now the run releases it right after its starts
(``domain.compensation.release_untried_round``, a fenced write): unowned and due again at once, nothing counted;
the next run claims the next round under a new instance id.

The stall is a client whose starts never answer, through the trigger's own ``bounded_client``, the bound shortened
(as ``test_redteam46_timer_budgets.py``); the store is the Cosmos DB protocol server."""

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
from domain.compensation import ROUND_NOT_TRIED, compensation_instance_id
from domain.states import ProcessState
from domain.transitions import SUPERVISOR
from orchestrators.names import COMPENSATION
from supervisor.scan import ScanState
from tests.fakes import RecordingClient
from tests.supervisor.test_redteam46_timer_budgets import StalledClient, handed_over

pytestmark = pytest.mark.cosmos

BOUND = 0.6  # DURABLE_CALL_TIMEOUT for the test: the first wave hangs this long
ROUNDS = 10  # a wave of PARALLEL_CALLS (8) is tried; the 2 after it are not, the batch's time for starts spent


def _run(functions: Any, client: Any) -> None:
    """The supervisor's timer trigger, as the Functions host calls it."""
    user = functions["supervisor"].func
    trigger = getattr(user, "client_function", None) or user.__wrapped__
    asyncio.run(trigger(timer=TimerRequest(past_due=False), client=client))


def test_a_round_never_tried_is_due_again_at_once_and_the_next_run_claims_and_starts_the_next_round(
    functions, make_ctx, states, clock, monkeypatch, caplog
):
    monkeypatch.setattr(durable_client, "DURABLE_CALL_TIMEOUT", timedelta(seconds=BOUND))
    monkeypatch.setattr(supervisor.backend_wait, "DURABLE_CALL_TIMEOUT", timedelta(seconds=BOUND))
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    monkeypatch.setattr(supervisor.blueprint, "watch_dead_letters", lambda *_: None)
    dependencies.use_context(make_ctx(START_GRACE_SECONDS="1", SUPERVISOR_MAX_RECORDS=str(ROUNDS + 2)))
    orders = [f"undo{i:02}" for i in range(ROUNDS)]
    try:
        for order in orders:
            handed_over(states, order, clock)  # Compensating, unowned, due: its round 2 to claim (attempt 1 ran)
        stalled = StalledClient()
        with caplog.at_level(logging.INFO):
            _run(functions, stalled)

        tried = {instance.split(":")[0] for instance in stalled.starts}
        untried = [order for order in orders if order not in tried]
        assert len(tried) == 8 and len(untried) == ROUNDS - 8
        for order in untried:  # released by the run that claimed it: due now, nothing counted
            record = states.get(order)
            assert record is not None and record.process_state is ProcessState.COMPENSATING
            assert (record.locked_by, record.complete_by) == (None, clock.now())
            assert (record.failure_count, record.starts_missed, record.attempt) == (0, 0, 2)
            last = record.history[-1]
            assert (last.event, last.by) == (ROUND_NOT_TRIED, SUPERVISOR)
            assert f"{compensation_instance_id(order, 2)} was never started" in last.detail
        for order in tried:  # a start sent, whatever it did: left claimed, as after a failed start
            record = states.get(order)
            assert record is not None and record.locked_by == compensation_instance_id(order, 2)
        released = sorted(
            str(r.__dict__["instanceId"])
            for r in caplog.records
            if r.__dict__.get("event") == "CompensationStartReleased"
        )
        assert released == [compensation_instance_id(order, 2) for order in untried]

        working = RecordingClient()
        _run(functions, working)  # the next run, at once: no start grace, no backoff
    finally:
        dependencies.use_context(None)

    # each released order's next round claimed and started under a new instance id; the stalled rounds not yet due
    assert sorted(str(instance) for _, instance, _ in working.started) == [
        compensation_instance_id(o, 3) for o in untried
    ]
    assert {name for name, _, _ in working.started} == {COMPENSATION}
    for order in untried:
        record = states.get(order)
        assert record is not None and record.locked_by == compensation_instance_id(order, 3)
        assert (record.failure_count, record.starts_missed) == (0, 0)
