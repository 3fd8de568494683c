"""Fixtures shared by the compensation tests that run the real agents over the simulators."""

from __future__ import annotations

import pytest

from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger
from dependencies import AppContext


@pytest.fixture
def ledger(app_context: AppContext) -> Ledger:
    """One ledger shared by every simulated service of ``app_context`` (the agents' remote services)."""
    shared = Ledger()
    app_context.remote = dict(simulated_services(app_context.clock, ledger=shared))  # type: ignore[arg-type]
    return shared
