"""The set of simulated services an app (or a test) uses, sharing one ledger."""

from __future__ import annotations

from collections.abc import Mapping

from adapters.clock import Clock
from adapters.remote.simulators.catalog import CATALOG, SEED_ORDER
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import Ledger
from adapters.remote.simulators.service import SimulatedService


def simulated_services(
    clock: Clock,
    configs: Mapping[str, SimulatorConfig] | None = None,
    ledger: Ledger | None = None,
    seed: int | None = 0,
) -> dict[str, SimulatedService]:
    """One simulator per known service (inventory, payment, shipping, payment_backup). A service missing from
    ``configs`` behaves perfectly. Each service gets its own random stream derived from ``seed``."""
    configs = configs or {}
    unknown = set(configs) - set(CATALOG)
    if unknown:
        raise ValueError(f"no simulator for service(s) {sorted(unknown)}; known: {sorted(CATALOG)}")
    shared = ledger if ledger is not None else Ledger()
    return {
        name: SimulatedService(
            name,
            clock,
            configs.get(name),
            shared,
            seed=None if seed is None else seed * 1000 + index,
        )
        for index, name in enumerate(SEED_ORDER)
    }
