"""The host's two concurrency limits beside the worker's sync pool (``tests/runtime/test_worker_threads.py``):

- host.json's ``maxConcurrentActivityFunctions`` (40): the Durable extension dispatches no more activity work items
  at once on an instance (DurableTask.Core's dispatcher takes a concurrency slot before it fetches one), so the rest
  wait on the work-item queue while orchestrator episodes go on and the orchestrations' timers run;
- the async functions' blocking pool: the event loop's default executor, where ``asyncio.to_thread`` runs, which
  ``dependencies.size_blocking_pool`` gives ``PYTHON_THREADPOOL_THREAD_COUNT`` threads.

Before, the runner ran every activity that was due at once, up to the worker's threads where the extension lets
host.json's limit run (35 at once in ``slow-remote-calls.json``, 150 orders, seed 1), and every
``asyncio.to_thread`` call at once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

import submission.blueprint
import submission.intake
from contracts.names import ORDERS_QUEUE
from localrun.host import HostedFunction, host_json, local_settings_example, max_concurrent_activities
from localrun.profile import Profile, ProfileError
from orchestrators import names
from tests.runtime.harness import CLIENT_QUEUE, T0, RuntimeHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos

ACTIVITY_SECONDS = 100


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(local_settings_example(), cosmos_db=cosmos_db)
    yield made
    made.close()


def test_the_activity_limit_is_host_jsons_or_the_extensions_default(harness: RuntimeHarness) -> None:
    configured = host_json()["extensions"]["durableTask"]["maxConcurrentActivityFunctions"]
    assert harness.host.engine.max_activities == configured == 40
    assert max_concurrent_activities({}) == 10  # Consumption's default, and 10 x the one core of a Flex instance
    assert max_concurrent_activities({"extensions": {"durableTask": {"maxConcurrentActivityFunctions": 3}}}) == 3


class ActivityRuns:
    """Records when each activity invocation began and ended (seconds after T0); each takes ACTIVITY_SECONDS."""

    def __init__(self, harness: RuntimeHarness) -> None:
        self.harness = harness
        self.began: list[float] = []
        self.spans: list[tuple[float, float]] = []
        harness.host.on_invoke = self.on_invoke

    def on_invoke(self, function: HostedFunction) -> None:
        if function.trigger_type == "activityTrigger":
            began = self.seconds()
            self.began.append(began)
            self.harness.clock.sleep(ACTIVITY_SECONDS)
            self.spans.append((began, self.seconds()))

    def seconds(self) -> float:
        return (self.harness.clock.now() - T0).total_seconds()

    def most_at_once(self) -> int:
        edges = sorted([(began, 1) for began, _ in self.spans] + [(ended, -1) for _, ended in self.spans])
        most = current = 0
        for _, change in edges:  # an end sorts before a beginning at the same moment
            current += change
            most = max(most, current)
        return most


def _instance(n: int) -> str:
    return f"status:o{n}:Rejected:0:42"


def _start(harness: RuntimeHarness, instances: int) -> None:
    """Starts ``instances`` status couriers at once (their first activity: ``publish_status``)."""
    for n in range(instances):
        given = {"orderId": f"o{n}", "status": "Rejected", "attempt": 0, "replyTo": CLIENT_QUEUE, "variant": "42"}
        harness.host.engine.start(names.DELIVER_STATUS, _instance(n), json.dumps(given))


def test_without_a_limit_every_activity_runs_at_once(harness: RuntimeHarness) -> None:
    harness.host.engine.max_activities = None
    runs = ActivityRuns(harness)
    _start(harness, 3)
    harness.host.run_until(T0 + timedelta(seconds=3 * ACTIVITY_SECONDS + 50))
    assert runs.began[:3] == [0, 0, 0]
    assert harness.host.engine.counters.activities_peak == runs.most_at_once() == 3
    assert harness.host.engine.counters.activities_waited == 0


def test_activities_past_the_limit_wait_on_the_queue_in_order(harness: RuntimeHarness) -> None:
    harness.host.engine.max_activities = 1
    runs = ActivityRuns(harness)
    _start(harness, 3)
    harness.host.run_until(T0 + timedelta(seconds=50))
    # one activity in flight; the other two orchestrations ran their first episode all the same (the extension's
    # orchestration dispatcher has its own limit), their work items waiting on the queue
    assert runs.began == [0]
    statuses = {harness.host.engine.instance(_instance(n)).status for n in range(3)}  # type: ignore[union-attr]
    assert statuses == {OrchestrationRuntimeStatus.Running}
    harness.host.run_until(T0 + timedelta(seconds=3 * ACTIVITY_SECONDS + 50))
    assert runs.began[:3] == [0, ACTIVITY_SECONDS, 2 * ACTIVITY_SECONDS]
    assert harness.host.engine.counters.activities_peak == runs.most_at_once() == 1
    assert harness.host.engine.counters.activities_waited >= 2
    assert harness.host.engine.counters.activity_wait_longest_s >= 2 * ACTIVITY_SECONDS


def test_the_profile_sets_the_limits() -> None:
    parsed = Profile.parse(
        {"durable": {"max_concurrent_activity_functions": 2}, "host": {"blocking_threads": 3, "worker_threads": 4}}
    )
    assert (parsed.max_concurrent_activities, parsed.blocking_threads, parsed.worker_threads) == (2, 3, 4)
    assert Profile.parse({}).max_concurrent_activities is None
    assert Profile.parse({}).blocking_threads is None
    for bad in (0, 1001, 2.5, True, "5"):
        with pytest.raises(ProfileError, match=r"durable\.max_concurrent_activity_functions"):
            Profile.parse({"durable": {"max_concurrent_activity_functions": bad}})
    for bad in (0, 257, 2.5, True, "5"):
        with pytest.raises(ProfileError, match=r"host\.blocking_threads"):
            Profile.parse({"host": {"blocking_threads": bad}})


def _handler_starts(harness: RuntimeHarness, monkeypatch: pytest.MonkeyPatch, orders: int) -> list[float]:
    """Seconds after T0 at which the intake's blocking work (``handle_orders_message``, which ``submit_order`` hands
    ``asyncio.to_thread``) begins for each of ``orders`` orders sent at once, each taking 100 s first."""
    starts: list[float] = []
    real: Callable[..., Any] = submission.intake.handle_orders_message

    def slow(*args: Any) -> Any:
        starts.append((harness.clock.now() - T0).total_seconds())
        harness.clock.sleep(100)
        return real(*args)

    monkeypatch.setattr(submission.blueprint, "handle_orders_message", slow)
    for n in range(orders):
        harness.send(ORDERS_QUEUE, json.dumps(order(orderId=f"ord-pool-{n}")), f"ord-pool-{n}")
    harness.host.run_until(T0 + timedelta(seconds=150))
    return starts


def test_the_blocking_pool_defaults_to_the_app_settings_thread_count(harness: RuntimeHarness) -> None:
    assert harness.host.blocking_threads == harness.host.worker_threads == 104


def test_without_a_limit_every_blocking_call_runs_at_once(
    harness: RuntimeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.host.blocking_threads = None
    assert _handler_starts(harness, monkeypatch, 3) == [0, 0, 0]
    assert harness.host.blocking_waits == 0
    assert harness.host.blocking_peak >= 3  # (a timer's blocking calls may run beside them)


def test_blocking_calls_of_async_invocations_wait_for_a_thread_of_their_pool(
    harness: RuntimeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.host.blocking_threads = 1
    assert _handler_starts(harness, monkeypatch, 3)[:2] == [0, 100]
    assert harness.host.blocking_waits >= 2
    assert harness.host.blocking_peak == 1
