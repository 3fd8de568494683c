"""The worker's thread pool for sync functions (``PYTHON_THREADPOOL_THREAD_COUNT``, profile ``host.worker_threads``):
an invocation of a sync function the host handed over waits for a thread, in arrival order, while its message's lock
renewal (up to ``maxAutoLockRenewalDuration`` from receipt) and its functionTimeout run. Before, the runner ran every
invocation that was due at once: with remote calls of 90 s-8 min and Cosmos DB at 3-10 s a request up to 31 sync
invocations were in flight together, which a worker of 5 threads (``min(32, cores + 4)`` on one core) runs 5 at a
time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from domain.workflow import request_queues
from localrun.host import HostedFunction, local_settings_example, worker_thread_count
from localrun.profile import Profile, ProfileError
from tests.runtime.harness import T0, RuntimeHarness

pytestmark = pytest.mark.cosmos

PAYMENT_REQUESTS = request_queues()["payment"]


@pytest.fixture
def harness(cosmos_db: Any) -> Iterator[RuntimeHarness]:
    made = RuntimeHarness(local_settings_example(), cosmos_db=cosmos_db)
    yield made
    made.close()


def _agent_starts(harness: RuntimeHarness, messages: int, seconds: float) -> list[float]:
    """Seconds after T0 at which the payment agent's invocations begin their work, each taking ``seconds``."""
    starts: list[float] = []

    def on_invoke(function: HostedFunction) -> None:
        if function.name == "agent_payment":
            starts.append((harness.clock.now() - T0).total_seconds())
            harness.clock.sleep(seconds)

    harness.host.on_invoke = on_invoke
    for n in range(messages):
        harness.send(PAYMENT_REQUESTS, json.dumps({"not": "a request"}), f"req-{n}")
    harness.run_until_idle(timedelta(hours=1))
    return starts


def test_without_a_limit_every_invocation_runs_at_once(harness: RuntimeHarness) -> None:
    harness.host.worker_threads = None
    assert _agent_starts(harness, 3, 100) == [0, 0, 0]
    assert harness.host.thread_waits == 0


def test_the_pool_defaults_to_the_app_settings_thread_count(harness: RuntimeHarness) -> None:
    """The host's pool is the app settings' PYTHON_THREADPOOL_THREAD_COUNT, as the worker reads it, so a run models
    what the deployed app gets (the Bicep sets the same value as local.settings.json.example); before, a run had no
    limit unless its profile set ``host.worker_threads``. (The app refuses a count under its sync concurrency, so a
    smaller pool is the profile's key.)"""
    assert harness.host.worker_threads == worker_thread_count(local_settings_example()) == 104
    assert [worker_thread_count({"PYTHON_THREADPOOL_THREAD_COUNT": v}) for v in ("2", "", "0", "x")] == [2] + [None] * 3


def test_sync_invocations_wait_for_a_thread_in_arrival_order(harness: RuntimeHarness) -> None:
    harness.host.worker_threads = 2
    assert _agent_starts(harness, 5, 100) == [0, 0, 100, 100, 200]
    assert harness.host.thread_waits == 3


def test_the_wait_for_a_thread_counts_towards_the_messages_lock_renewal(harness: RuntimeHarness) -> None:
    """The third invocation begins 400 s after its message was received and runs 200 s: past the 5 minutes of lock
    renewal from receipt (the last renewal holds it to 5:10), so its message is delivered again while it runs."""
    harness.host.worker_threads = 1
    starts = _agent_starts(harness, 3, 200)
    assert starts[:3] == [0, 200, 400]
    assert harness.host.executions["agent_payment"] > 3  # the third message handed to a second invocation


def test_the_profile_sets_it() -> None:
    assert Profile.parse({"host": {"worker_threads": 5}}).worker_threads == 5
    assert Profile.parse({}).worker_threads is None
    for bad in (0, 257, 2.5, True, "5"):
        with pytest.raises(ProfileError, match=r"host\.worker_threads"):
            Profile.parse({"host": {"worker_threads": bad}})
