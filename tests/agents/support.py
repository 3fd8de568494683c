"""Builders shared by the agent tests: requests, an app context over simulators, a scripted service."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from adapters.clock import Clock, ManualClock
from adapters.cosmos.deferral_store import DeferralLog
from adapters.cosmos.ops_queries import OpsQueries
from adapters.cosmos.order_store import OrderStore
from adapters.cosmos.state_store import StateStore
from adapters.remote.interface import RemoteCall, RemoteError, RemoteService
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger
from adapters.servicebus.deferred import DeferredMessageStore
from contracts.messages import AgentRequest
from dependencies import AppContext
from domain.ids import idempotency_key, instance_id, request_id
from domain.workflow import step as workflow_step
from settings import Settings
from tests.fakes import HealthStoreWithoutMemory, RecordingSender

START = datetime.fromisoformat("2026-03-01T12:00:00+00:00")


class Untouchable:
    """Stands where a store must be but the code under test has no business using it: any use fails
    the test (agents never touch the state, order, deferral or operator stores)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, member: str) -> Any:
        raise AssertionError(f"agents must not use the {self._name} store (called .{member})")


def agent_settings(**overrides: str) -> Settings:
    values = {"AGENT_MAX_ATTEMPTS": "4", "AGENT_RETRY_BASE_MS": "1000", "AGENT_RETRY_MAX_MS": "8000"}
    values.update(overrides)
    return Settings.from_env({}, **values)


def make_request(
    step: str = "charge-payment",
    *,
    order_id: str = "order-1",
    attempt: int = 1,
    deadline: datetime | None = None,
    action: str = "do",
    payload: dict[str, Any] | None = None,
) -> AgentRequest:
    instance = instance_id(order_id, attempt)
    if payload is None:
        defaults: dict[str, dict[str, Any]] = {
            "reserve-inventory": {"lines": [{"sku": "SKU-1", "quantity": 2}, {"sku": "SKU-2", "quantity": 1}]},
            "charge-payment": {"amountCents": 4200, "currency": "EUR", "customerId": "c-1", "prepaid": False},
            "arrange-shipment": {"shipTo": "Somewhere 1", "reservationId": "res-1"},
        }
        payload = defaults[step]
    return AgentRequest(
        request_id=request_id(instance, step, workflow_step(step).agent),
        instance_id=instance,
        order_id=order_id,
        step=step,
        action=action,
        attempt=attempt,
        deadline=deadline or START + timedelta(seconds=60),
        idempotency_key=idempotency_key(order_id, step),
        payload=payload,
    )


def make_context(
    clock: ManualClock,
    *,
    configs: dict[str, SimulatorConfig] | None = None,
    sender: RecordingSender | None = None,
    ledger: Ledger | None = None,
    settings: Settings | None = None,
    seed: int = 7,
) -> AppContext:
    import random

    services = simulated_services(clock, configs, ledger if ledger is not None else Ledger(), seed)
    return AppContext(
        settings=settings or agent_settings(),
        clock=clock,
        states=cast(StateStore, Untouchable("states")),
        orders=cast(OrderStore, Untouchable("orders")),
        sender=sender or RecordingSender(),
        remote=cast(dict[str, RemoteService], services),
        deferred=cast(DeferredMessageStore, Untouchable("deferred-message")),
        deferrals=cast(DeferralLog, Untouchable("deferral")),
        ops=cast(OpsQueries, Untouchable("operator read model")),
        health=HealthStoreWithoutMemory(),
        rng=random.Random(seed),
    )


class ScriptedService:
    """A remote service that answers from a script (a dict result, or a ``RemoteError`` to raise),
    spends ``latency_s`` on the clock per call, and records each call with its start time. It stands
    in for the remote service, not for the agent under test."""

    def __init__(self, clock: Clock, script: Iterable[dict[str, Any] | RemoteError], latency_s: float = 0.0) -> None:
        self._clock = clock
        self._script = list(script)
        self._latency_s = latency_s
        self.calls: list[tuple[datetime, RemoteCall]] = []

    def call(self, request: RemoteCall) -> dict[str, Any]:
        self.calls.append((self._clock.now(), request))
        self._clock.sleep(self._latency_s)
        answer = self._script[min(len(self.calls), len(self._script)) - 1]
        if isinstance(answer, RemoteError):
            raise answer
        return answer


def transient(message: str = "busy") -> RemoteError:
    return RemoteError(message, transient=True)


def permanent(message: str = "declined") -> RemoteError:
    return RemoteError(message, transient=False)


@dataclass(frozen=True)
class StartClaim:
    """What ``start_orchestrations`` starts (``orchestrators.starter.Startable``): an order's instance, its input the
    order id only (the tests look at the starts, not at what the orchestration does)."""

    order_id: str
    instance_id: str

    def orchestration_input(self) -> dict[str, Any]:
        return {"orderId": self.order_id}
