"""The remote service each agent talks to: the built-in simulator, or a real HTTP endpoint when the
service's ``<SERVICE>_SERVICE_URL`` setting is set."""

from __future__ import annotations

from collections.abc import Mapping

from adapters.clock import Clock
from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteService
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger
from domain.workflow import AGENTS
from settings import Settings


def service_names() -> list[str]:
    return sorted({a.service for a in AGENTS.values()})


def remote_services(
    settings: Settings,
    clock: Clock,
    configs: Mapping[str, SimulatorConfig] | None = None,
    ledger: Ledger | None = None,
    seed: int | None = None,
) -> dict[str, RemoteService]:
    """Service name -> the ``RemoteService`` its agent calls. ``configs``, ``ledger`` and ``seed``
    shape the simulators (the local runner passes a fault profile; production uses perfect ones)."""
    simulators = simulated_services(clock, configs, ledger, seed)
    chosen: dict[str, RemoteService] = {}
    for name in service_names():
        url = settings.service_url(name)
        chosen[name] = HttpRemoteService(url) if url else simulators[name]
    return chosen
