"""A rollback under in-flight attempts: the code deployed again is older than the code that started them.
Through the runner's Durable engine, which does what the extension does: an instance whose orchestrator name
the deployed code does not register (``process_order_v4`` after a rollback to code with ``_v3`` only) fails at
its next episode, "The function '...' doesn't exist, is disabled, or is not an orchestrator function"
(``DurableTaskExtension``'s orchestration middleware fails it with an ``OrchestrationFailureException``), and a
start under that name is refused. Its record waits for its ``completeBy``; the supervisor then retries it, one
counted retry (docs/deploy.md, "Upgrading and rolling back")."""

from __future__ import annotations

import json
from typing import Any

import azure.durable_functions as df
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from tests.orchestrators.support import T0

NEWER, OLDER = "process_order_v4", "process_order_v3"
NOT_FOUND = "The function '{}' doesn't exist, is disabled, or is not an orchestrator function."


def _waits_for_a_reply(context: Any) -> Any:
    yield context.call_activity("begin_step", None)
    reply = yield context.wait_for_external_event("AgentReply")
    return reply


def test_an_instance_of_a_name_the_deployed_code_lacks_fails_at_its_next_episode() -> None:
    orchestrator = df.Orchestrator.create(_waits_for_a_reply)
    engine = DurableEngine(
        {NEWER: orchestrator, OLDER: orchestrator}, lambda name, value: {"owned": True}, ManualClock(T0)
    )
    engine.start(NEWER, "o1:1", json.dumps({"orderId": "o1", "attempt": 1}))
    engine.run_until_idle()
    instance = engine.instance("o1:1")
    assert instance is not None and instance.status is OrchestrationRuntimeStatus.Running

    engine.deploy({OLDER: orchestrator})  # the rollback: the older code has no _v4
    assert instance.status is OrchestrationRuntimeStatus.Running  # nothing happens until its next event
    engine.raise_event("o1:1", "AgentReply", json.dumps({"outcome": "succeeded"}))
    engine.run_until_idle()
    failed = engine.instance("o1:1")
    assert failed is not None and failed.status is OrchestrationRuntimeStatus.Failed
    assert failed.output == NOT_FOUND.format(NEWER)

    refused = engine.start(NEWER, "o2:1", json.dumps({"orderId": "o2", "attempt": 1}))
    assert (refused.status, refused.body["ExceptionMessage"]) == (400, NOT_FOUND.format(NEWER))


def test_an_instance_of_a_name_the_deployed_code_keeps_goes_on_under_it() -> None:
    """Rolling forward again: a ``_v3`` instance the older code started replays under the newer code, which
    keeps ``_v3`` registered and running."""
    orchestrator = df.Orchestrator.create(_waits_for_a_reply)
    engine = DurableEngine({OLDER: orchestrator}, lambda name, value: {"owned": True}, ManualClock(T0))
    engine.start(OLDER, "o1:2", json.dumps({"orderId": "o1", "attempt": 2}))
    engine.run_until_idle()
    engine.deploy({NEWER: orchestrator, OLDER: orchestrator})
    engine.raise_event("o1:2", "AgentReply", json.dumps({"outcome": "succeeded"}))
    engine.run_until_idle(max_steps=100)
    done = engine.instance("o1:2")
    assert done is not None and done.status is OrchestrationRuntimeStatus.Completed
    assert done.output == {"outcome": "succeeded"}
