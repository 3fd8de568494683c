"""An invocation that runs past host.json's ``functionTimeout`` fails, and the host restarts the worker process
running it, failing every invocation in flight on that worker (azure-functions-host
``WebScriptHostExceptionHandler.OnTimeoutExceptionAsync``, ``RestartWorkerWithInvocationIdAsync``); the host and
its listeners go on. Before, the runner let an invocation run as long as it liked: under a slow Cosmos DB (8-10 s a
request) a supervisor run took 62 simulated minutes, past the 30 Azure gives it, while the Service Bus handlers
running beside it went on as if nothing happened (150 orders, seed 2, ``cosmos.latency_ms`` [8000, 10000])."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from localrun.host import HostedFunction, host_json, local_settings_example, timespan
from localrun.worker.http import HttpRequestData
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

TIMEOUT = timespan(host_json()["functionTimeout"])


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(local_settings_example(), cosmos_db=cosmos_db)
    yield made
    made.close()


def test_the_timeout_is_host_jsons(harness: RuntimeHarness) -> None:
    assert harness.host.function_timeout == TIMEOUT == timedelta(minutes=30)  # Flex Consumption's default


def _supervisor_starts(harness: RuntimeHarness, first_run: timedelta, order_at: timedelta, handler: timedelta) -> Any:
    """Runs the host with the supervisor's first run taking ``first_run`` and an order sent ``order_at`` after it
    starts, whose handler takes ``handler``; returns the supervisor's start times (seconds after its first)."""
    first = next(t.next_fire for t in harness.host.timers if t.function.name == "supervisor")
    starts: list[float] = []
    handlers = [0]

    def on_invoke(function: HostedFunction) -> None:
        if function.name == "supervisor":
            starts.append((harness.clock.now() - first).total_seconds())
            harness.clock.sleep(first_run.total_seconds() if len(starts) == 1 else 0)
        elif function.name == "submit_order":
            handlers[0] += 1
            harness.clock.sleep(handler.total_seconds() if handlers[0] == 1 else 0)

    harness.host.on_invoke = on_invoke
    harness.host.run_until(first + order_at)
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId="ord-timeout")), "ord-timeout")
    harness.host.run_until(first + first_run + timedelta(minutes=5))
    return starts


def test_a_run_past_the_timeout_is_cut_there_and_the_invocations_beside_it_fail(
    harness: RuntimeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    restarts: list[datetime] = []
    harness.host.on_worker_restart = lambda: restarts.append(harness.clock.now())
    with caplog.at_level(logging.ERROR, logger="localrun.host"):
        starts = _supervisor_starts(harness, timedelta(minutes=40), timedelta(minutes=28), timedelta(minutes=4))

    # the first run is cut at 30 minutes; its occurrences past, the next one runs at once, not past due
    assert starts[:2] == [0, TIMEOUT.total_seconds()]
    assert harness.host.function_timeouts == 1
    assert len(restarts) == 1
    assert [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "FunctionTimedOut"] == [
        "Timeout value of 0:30:00 exceeded by function 'supervisor': the host restarts the worker process, "
        "failing every invocation in flight on it"
    ]
    assert ("supervisor", "FunctionTimeout") in [(n, type(e).__name__) for n, e in harness.scheduler.failures]
    # the order's handler, 2 minutes into its 4 when the worker restarted, failed: the processor abandoned its
    # message, handled again at once by a second delivery
    assert harness.host.executions["submit_order"] == 2
    counters = harness.broker.counters(ORDERS_QUEUE)
    assert counters.abandoned == 1
    assert counters.completed == 1


def test_a_run_within_the_timeout_is_left_alone(harness: RuntimeHarness) -> None:
    starts = _supervisor_starts(harness, timedelta(minutes=29), timedelta(minutes=28), timedelta(minutes=4))

    assert starts[1] == timedelta(minutes=29).total_seconds()
    assert harness.host.function_timeouts == 0
    assert harness.host.executions["submit_order"] == 1
    assert harness.broker.counters(ORDERS_QUEUE).abandoned == 0


@pytest.mark.parametrize("drop", ["function timeout", "host restart"])
def test_a_request_dropped_before_its_invocation_began_is_answered(harness: RuntimeHarness, drop: str) -> None:
    """An HTTP request whose invocation was dropped before it began (a restart, or a timeout's worker restart, right
    after the host handed it over) is answered 503, as the ones dropped while they ran. Before, its future was
    never answered: the runner's operator waited for it to the run's horizon."""
    url = "http://127.0.0.1:7071/api/ops/summary"
    if drop == "function timeout":
        first = next(t.next_fire for t in harness.host.timers if t.function.name == "supervisor")
        harness.host.on_invoke = lambda f: harness.clock.sleep(3600) if f.name == "supervisor" else None
        harness.host.run_until(first + TIMEOUT - timedelta(seconds=1))
    future = harness.host.submit_http(HttpRequestData("GET", url, {"X-Local-Principal": "x"}))
    harness.host.pump()  # the request's invocation is handed over, not begun
    if drop == "host restart":
        harness.host.restart()
    else:
        harness.clock.advance_to(first + TIMEOUT)
        harness.host.pump()  # the supervisor times out: the worker restarts before the request's invocation begins
        assert harness.host.function_timeouts == 1
    assert future.done()
    assert future.result().status == 503


def test_a_message_handed_over_before_the_worker_restarted_is_abandoned(harness: RuntimeHarness) -> None:
    """A message whose invocation the host had handed to the worker, not yet begun, when a timeout restarted it fails
    as the running ones do: abandoned, and delivered again at once."""
    first = next(t.next_fire for t in harness.host.timers if t.function.name == "supervisor")
    harness.host.on_invoke = lambda f: harness.clock.sleep(3600) if f.name == "supervisor" else None
    harness.host.run_until(first + TIMEOUT - timedelta(seconds=1))
    harness.send(ORDERS_QUEUE, json.dumps(order(orderId="ord-handed")), "ord-handed")
    harness.host.pump()  # delivered, its invocation not begun
    harness.clock.advance_to(first + TIMEOUT)
    harness.host.pump()

    assert harness.host.function_timeouts == 1
    assert harness.broker.counters(ORDERS_QUEUE).abandoned == 1
    assert harness.host.in_flight[ORDERS_QUEUE] == 1  # delivered again at once, in the same pump
    harness.host.on_invoke = None
    harness.run_until_idle()
    assert harness.broker.counters(ORDERS_QUEUE).completed == 1
