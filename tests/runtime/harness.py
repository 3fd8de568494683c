"""A ``LocalHost`` (the runner's stand-in for the Functions host, driving the real Functions runtime)
over an in-process broker, for tests of what the host hands the runtime and what comes back."""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.cosmos.deferral_store import CosmosDeferralLog
from adapters.cosmos.health_store import CosmosHealthStore
from adapters.cosmos.ops_queries import CosmosOpsQueries
from adapters.cosmos.order_store import CosmosOrderStore
from adapters.cosmos.state_store import CosmosStateStore
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ALL_QUEUES, ORDERS_CONTAINER, STATE_CONTAINER
from dependencies import AppContext, use_context
from localrun.host import LocalHost, local_settings_example
from localrun.servicebus import InProcessBroker, QueuePolicy
from localrun.virtual_time import TaskScheduler
from settings import Settings
from tests.contexts import context_with

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
CLIENT_QUEUE = "client-statuses"


class RuntimeHarness:
    def __init__(self, app_settings: Mapping[str, str] | None = None, cosmos_db: Any = None) -> None:
        self.scheduler = TaskScheduler(T0)
        self.clock = self.scheduler.clock
        self.broker = InProcessBroker(self.clock)
        for queue in dict.fromkeys((*ALL_QUEUES, CLIENT_QUEUE)):
            self.broker.declare_queue(queue, QueuePolicy())
        self.app_settings = dict(local_settings_example() if app_settings is None else app_settings)
        self.ctx: AppContext | None = None
        if cosmos_db is not None:
            state = cosmos_db.get_container_client(STATE_CONTAINER)
            self.ctx = AppContext(
                settings=Settings.from_env(self.app_settings),
                clock=self.clock,
                states=CosmosStateStore(state),
                orders=CosmosOrderStore(cosmos_db.get_container_client(ORDERS_CONTAINER)),
                sender=self.broker,
                remote={},
                deferred=self.broker.deferred_store,
                deferrals=CosmosDeferralLog(state),
                ops=CosmosOpsQueries(state),
                health=CosmosHealthStore(state),
                rng=random.Random(1),
            )
            use_context(self.ctx)
        self.host = LocalHost(self.scheduler, self.broker, self.app_settings)

    def change_context(self, **changes: Any) -> AppContext:
        """Installs, as ``self.ctx``, the context with ``changes`` (field name to collaborator) over the current one."""
        assert self.ctx is not None, "a harness without cosmos_db installs no context"
        self.ctx = context_with(self.ctx, **changes)
        return self.ctx

    def send(self, queue: str, body: str | bytes, message_id: str) -> None:
        self.broker.send(queue, OutgoingMessage(body=body, message_id=message_id))

    def run_until_idle(self, limit: timedelta = timedelta(minutes=10)) -> None:
        def idle() -> bool:
            ready = any(q in self.host.queues for q in self.broker.ready_queues())
            return not (self.scheduler.busy() or self.host.engine.has_work() or ready)

        self.host.run_until(self.clock.now() + limit, stop=idle)

    def close(self) -> None:
        self.host.close()
        self.scheduler.stop_idle_threads()
        if self.ctx is not None:
            use_context(None)
