"""An upgrade under in-flight attempts: an instance of a retired scheduler version (``process_order_v1``)
ends at its next replay without touching its record, and the supervisor retries the order under the
current version once its ``completeBy`` passes (orchestrators/retired.py, docs/design.md "Versions")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from domain import transitions
from domain.states import ProcessState
from orchestrators import names
from supervisor.recovery import RecoveryAction, recover
from tests.durable_history import History
from tests.orchestrators.support import T0, sample_order
from tests.runtime.harness import RuntimeHarness

V1 = "process_order_v1"


def test_the_retired_name_is_registered_and_is_not_the_current_scheduler(functions: dict[str, Any]) -> None:
    assert V1 in names.RETIRED_SCHEDULERS
    assert names.SCHEDULER not in names.RETIRED_SCHEDULERS
    for name in (names.SCHEDULER, *names.RETIRED_SCHEDULERS):
        assert name in functions, name  # the worker indexed it: an old instance finds its function


def test_a_v1_history_mid_attempt_ends_superseded_and_schedules_nothing(functions: dict[str, Any]) -> None:
    """A v1 attempt recorded by the old code (load, Processing sent, step begun, request sent, waiting
    for the agent's reply) replays on the new app: it ends at once and asks the host for nothing."""
    order = sample_order()
    h = History("o1:1", {"orderId": "o1", "attempt": 1}, start=T0, name=V1)
    h.activity_completed("load_order", {"owned": True, "order": order, "completed": {}, "stepTimeoutSeconds": 60})
    h.activity_completed("publish_status", None, at=T0)
    h.activity_completed("begin_step", {"owned": True}, at=T0)
    h.activity_completed("send_agent_request", None, at=T0)
    h.timer_created_not_fired(T0 + timedelta(seconds=60))
    h.event_raised("AgentReply", {"requestId": "o1:1:charge-payment:payment", "outcome": "succeeded"}, at=T0)

    replayed = h.run(functions[V1].func)

    assert replayed.error is None
    assert replayed.is_done
    assert replayed.output == {"result": "Superseded", "version": V1}
    assert replayed.new_actions == []


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(cosmos_db=cosmos_db)
    yield made
    made.close()


@pytest.mark.cosmos
def test_an_in_flight_v1_instance_leaves_its_record_to_the_supervisor(harness: RuntimeHarness) -> None:
    """Through the real runtime: the v1 instance completes ``Superseded``; the record it owned is exactly
    as it was (same version), and once ``completeBy`` passes the supervisor retries the order."""
    ctx = harness.ctx
    assert ctx is not None
    now = harness.clock.now()
    ctx.orders.create_or_verify(sample_order("o-v1"))
    ctx.states.create(transitions.new_record("o-v1", "client-statuses", now))
    pending = ctx.states.get("o-v1")
    assert pending is not None
    claimed = ctx.states.replace(transitions.claim(pending, now, ctx.settings.start_grace))
    assert claimed.locked_by == "o-v1:1"

    harness.host.engine.start(V1, claimed.locked_by, json.dumps({"orderId": "o-v1", "attempt": 1}))
    harness.run_until_idle(timedelta(seconds=1))

    instance = harness.host.engine.instance("o-v1:1")
    assert instance is not None and instance.is_finished
    assert instance.output == {"result": "Superseded", "version": V1}
    untouched = ctx.states.get("o-v1")
    assert untouched is not None and untouched.version == claimed.version
    assert harness.broker.contents("client-statuses") == []  # nothing said to the submitter

    harness.clock.advance_to(now + ctx.settings.start_grace + timedelta(seconds=1))
    recovered = recover(ctx, untouched)
    assert recovered.action is RecoveryAction.RECOVERED
    assert recovered.record is not None
    assert (recovered.record.process_state, recovered.record.failure_count) == (ProcessState.PENDING, 1)
