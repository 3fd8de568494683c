"""A worker's first ``get_context()`` builds the SDK clients, over the network, and no async trigger makes it on
the worker's event loop.

In Azure each worker process builds its context on first use (``dependencies.build_from_settings``): the
``azure-cosmos`` ``CosmosClient`` reads the database account while it is constructed
(``CosmosClientConnection.__init__``: ``_GetDatabaseAccount``), after a token from the managed identity, and
``get_context`` holds its lock meanwhile. The async triggers (the timers, ``submit_order``, ``ops_order``)
called it on the event loop, so a cold worker held every invocation until the clients were built, and while
the account could not be read (the database unreachable) each of them tried again there, on the loop. The
local runner installs its context before the first invocation, so no run ever built one: here a stand-in
build takes 2 simulated seconds, the time the network takes, and a wait on the loop is counted
(``clock.untracked_sleeps``, the report's ``blocking_sleeps_on_worker_loop``). (The Cosmos client is now made at
the first store request instead, ``adapters.cosmos.client.LazyClient``, which the triggers make off the loop; a
build stays off the loop all the same.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import dependencies
from localrun.host import local_settings_example
from localrun.worker.http import HttpRequestData
from localrun.worker.process import LOOP_THREAD
from settings import Settings
from tests.runtime.harness import RuntimeHarness
from tests.submission.corpus import order

BUILD_SECONDS = 2.0


@pytest.fixture
def cold(cosmos_db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RuntimeHarness, list[str]]]:
    """A harness whose worker has no context yet: the first ``get_context()`` builds it (2 s, a thread each)."""
    harness = RuntimeHarness(local_settings_example(), cosmos_db=cosmos_db)
    built = harness.ctx
    builds: list[str] = []

    def build(settings: Settings) -> dependencies.AppContext:
        builds.append(threading.current_thread().name)
        harness.clock.sleep(BUILD_SECONDS)
        assert built is not None
        return built

    monkeypatch.setattr(dependencies, "build_from_settings", build)
    dependencies.use_context(None)
    yield harness, builds
    harness.close()


def first_timer(harness: RuntimeHarness) -> None:
    harness.host.run_until(min(t.next_fire for t in harness.host.timers) + timedelta(seconds=5))


def first_order(harness: RuntimeHarness) -> None:
    harness.send("orders", json.dumps(order(orderId="ord-cold-1")), "ord-cold-1")
    harness.run_until_idle(timedelta(seconds=10))


def first_ops_request(harness: RuntimeHarness) -> None:
    url = "http://127.0.0.1:7071/api/ops/orders/ord-cold-1"
    harness.host.call_http(HttpRequestData("GET", url, {"X-Local-Principal": "x"}))


@pytest.mark.cosmos
@pytest.mark.parametrize("first", [first_timer, first_order, first_ops_request], ids=["timer", "orders", "ops"])
def test_the_first_invocation_of_a_worker_builds_its_context_off_the_event_loop(
    cold: tuple[RuntimeHarness, list[str]], first: Callable[[RuntimeHarness], None]
) -> None:
    harness, builds = cold
    first(harness)
    assert builds, "the invocation did not build the context"
    assert harness.clock.untracked_sleeps[LOOP_THREAD] == 0, builds
    assert LOOP_THREAD not in builds
