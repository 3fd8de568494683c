"""Which remote service each agent gets: the simulator by default, HTTP when a URL is set."""

from __future__ import annotations

from adapters.clock import ManualClock
from adapters.remote.http_service import HttpRemoteService
from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import Ledger
from adapters.remote.simulators.service import SimulatedService
from settings import Settings


def test_every_service_of_the_workflow_is_a_simulator_by_default():
    services = remote_services(Settings.from_env({}), ManualClock())
    assert sorted(services) == ["inventory", "payment", "payment_backup", "shipping"]
    assert all(isinstance(s, SimulatedService) for s in services.values())


def test_a_service_url_switches_that_service_to_http():
    settings = Settings.from_env({}, PAYMENT_SERVICE_URL="https://pay.example.com/v1")
    services = remote_services(settings, ManualClock())
    payment = services["payment"]
    assert isinstance(payment, HttpRemoteService)
    assert payment.base_url == "https://pay.example.com/v1"
    assert isinstance(services["inventory"], SimulatedService)


def test_simulators_take_the_given_configs_and_ledger():
    ledger = Ledger()
    config = SimulatorConfig(transient_error_rate=0.5)
    services = remote_services(Settings.from_env({}), ManualClock(), {"shipping": config}, ledger, seed=1)
    shipping = services["shipping"]
    assert isinstance(shipping, SimulatedService)
    assert shipping.config is config
    assert shipping.ledger is ledger
