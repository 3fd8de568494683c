"""Fault profiles: what goes wrong during a simulation, and how often.

A profile is JSON; every key is optional; rates are probabilities per operation; agent and service
names are the workflow table's. An unknown key is an error that names the key, so a typo can never
silently switch a fault off."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from domain.workflow import AGENTS

AGENT_KEYS = {"crash_rate", "late_reply_rate", "duplicate_reply_rate", "lost_reply_rate"}
REMOTE_KEYS = {
    "latency_ms",
    "transient_error_rate",
    "permanent_error_rate",
    "outages",
    "response_loss_rate",
    "slow_call_rate",
    "slow_latency_ms",
}
COSMOS_KEYS = {"throttle_rate", "unavailable_rate", "lost_response_rate"}
SERVICEBUS_KEYS = {"send_failure_rate"}
HOST_KEYS = {"restart_every_s", "clock_skew_s"}
# The simulated hosts whose clocks may be skewed (host.clock_skew_s): the supervisor's timer, the
# agents (the functions that call remote services) and every other function of the app.
# Orchestrations read time from the Durable extension's history, and Cosmos DB, Service Bus and
# the remote services keep the true time.
CLOCK_HOSTS = ("supervisor", "agents", "app")
ORDER_KEYS = {
    "cancel_rate",
    "malformed_rate",
    "duplicate_submit_rate",
    "payment_notification_first_rate",
    "prepaid_rate",
}
TOP_KEYS = {"agents", "remote", "cosmos", "servicebus", "host", "supervisors", "starters", "orders", "reply_queues"}


class ProfileError(ValueError):
    pass


def _check_keys(where: str, data: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ProfileError(f"{where} must be an object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ProfileError(f"unknown key {where}.{unknown[0]} (allowed: {', '.join(sorted(allowed))})")
    return data


def _rate(where: str, value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ProfileError(f"{where} must be a probability between 0 and 1, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class AgentFaults:
    crash_rate: float = 0.0
    late_reply_rate: float = 0.0
    duplicate_reply_rate: float = 0.0
    lost_reply_rate: float = 0.0


@dataclass(frozen=True)
class OrderMix:
    cancel_rate: float = 0.0
    malformed_rate: float = 0.0
    duplicate_submit_rate: float = 0.0
    payment_notification_first_rate: float = 0.0
    prepaid_rate: float = 0.0


@dataclass(frozen=True)
class Profile:
    agents: dict[str, AgentFaults] = field(default_factory=dict)
    remote: dict[str, dict[str, Any]] = field(default_factory=dict)
    cosmos_throttle_rate: float = 0.0
    cosmos_unavailable_rate: float = 0.0
    send_failure_rate: float = 0.0
    restart_every_s: float | None = None
    cosmos_lost_response_rate: float = 0.0
    clock_skew_s: dict[str, float] = field(default_factory=dict)
    supervisors: int = 1
    starters: int = 1
    orders: OrderMix = field(default_factory=OrderMix)
    reply_queues: int = 3

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{path}: not JSON: {exc}") from None
        return cls.parse(data)

    @classmethod
    def parse(cls, data: Any) -> Profile:
        data = _check_keys("profile", data, TOP_KEYS)
        agents: dict[str, AgentFaults] = {}
        for name, raw in _check_keys("agents", data.get("agents", {}), set(AGENTS)).items():
            entry = _check_keys(f"agents.{name}", raw, AGENT_KEYS)
            agents[name] = AgentFaults(**{k: _rate(f"agents.{name}.{k}", v) for k, v in entry.items()})
        services = {a.service for a in AGENTS.values()}
        remote: dict[str, dict[str, Any]] = {}
        for name, entry in _check_keys("remote", data.get("remote", {}), services).items():
            remote[name] = dict(_check_keys(f"remote.{name}", entry, REMOTE_KEYS))
        cosmos = _check_keys("cosmos", data.get("cosmos", {}), COSMOS_KEYS)
        servicebus = _check_keys("servicebus", data.get("servicebus", {}), SERVICEBUS_KEYS)
        host = _check_keys("host", data.get("host", {}), HOST_KEYS)
        orders = _check_keys("orders", data.get("orders", {}), ORDER_KEYS)
        restart = host.get("restart_every_s")
        if restart is not None and (not isinstance(restart, int | float) or restart <= 0):
            raise ProfileError(f"host.restart_every_s must be a positive number, got {restart!r}")
        skew: dict[str, float] = {}
        for name, offset in _check_keys("host.clock_skew_s", host.get("clock_skew_s", {}), set(CLOCK_HOSTS)).items():
            if not isinstance(offset, int | float) or isinstance(offset, bool) or abs(offset) > 3600:
                raise ProfileError(f"host.clock_skew_s.{name} must be seconds within ±3600, got {offset!r}")
            skew[name] = float(offset)

        def count(key: str, default: int) -> int:
            value = data.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 8:
                raise ProfileError(f"{key} must be an integer from 1 to 8, got {value!r}")
            return value

        return cls(
            agents=agents,
            remote=remote,
            cosmos_throttle_rate=_rate("cosmos.throttle_rate", cosmos.get("throttle_rate", 0)),
            cosmos_unavailable_rate=_rate("cosmos.unavailable_rate", cosmos.get("unavailable_rate", 0)),
            send_failure_rate=_rate("servicebus.send_failure_rate", servicebus.get("send_failure_rate", 0)),
            restart_every_s=float(restart) if restart is not None else None,
            cosmos_lost_response_rate=_rate("cosmos.lost_response_rate", cosmos.get("lost_response_rate", 0)),
            clock_skew_s=skew,
            supervisors=count("supervisors", 1),
            starters=count("starters", 1),
            orders=OrderMix(**{k: _rate(f"orders.{k}", v) for k, v in orders.items()}),
            reply_queues=count("reply_queues", 3),
        )

    def agent(self, name: str) -> AgentFaults:
        return self.agents.get(name, AgentFaults())
