"""The remote service each agent talks to: the built-in simulator, or a real HTTP endpoint when the
service's ``<SERVICE>_SERVICE_URL`` setting is set. Made once per worker process (``dependencies.get_context``): an
HTTP service keeps its idle keep-alive connections across calls and invocations, at most as many as its agents make
calls at once on an instance (``callers_at_once``; ``adapters/remote/http_service.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from adapters.clock import Clock
from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteService
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger
from domain.workflow import AGENTS, Transport
from settings import MAX_CONCURRENT_ACTIVITIES, SERVICE_BUS_MAX_CONCURRENT_CALLS, Settings


def service_names() -> list[str]:
    return sorted({a.service for a in AGENTS.values()})


def callers_at_once(service: str) -> int:
    """The most calls one instance makes to ``service`` at once: each invocation of an agent that wraps it makes one
    call at a time, and the host runs up to host.json's ``maxConcurrentCalls`` invocations of a Service Bus agent and
    up to ``maxConcurrentActivityFunctions`` activities (an in-process agent runs in one). The connections its
    ``HttpRemoteService`` keeps: as many as may be needed at once, no more."""
    return sum(
        SERVICE_BUS_MAX_CONCURRENT_CALLS if a.transport is Transport.SERVICE_BUS else MAX_CONCURRENT_ACTIVITIES
        for a in AGENTS.values()
        if a.service == service
    )


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
        # made once per worker process (``dependencies.get_context``): its kept connections serve every invocation
        chosen[name] = HttpRemoteService(url, connections=callers_at_once(name)) if url else simulators[name]
    return chosen
