"""Fixtures shared by the compensation tests that run the real agents over the simulators."""

from __future__ import annotations

import pytest

from adapters.remote.simulators.fleet import simulated_services
from adapters.remote.simulators.ledger import Ledger
from adapters.remote.simulators.service import SimulatedService
from dependencies import AppContext
from tests.contexts import context_with


@pytest.fixture
def ctx(app_context: AppContext) -> AppContext:
    """``app_context`` whose remote services (the agents') are the simulators, sharing one ledger (``ledger``),
    installed in its place: a test of the agents uses this context, never ``app_context``."""
    return context_with(app_context, remote=dict(simulated_services(app_context.clock, ledger=Ledger())))


@pytest.fixture
def ledger(ctx: AppContext) -> Ledger:
    """The ledger shared by every simulated service of ``ctx``."""
    payment = ctx.remote["payment"]
    assert isinstance(payment, SimulatedService)
    return payment.ledger
