"""The built-in simulators (``<SERVICE>_SERVICE_URL`` empty, the deployment's default) as the deployed app has them:
built per process by ``remote_services``, so each Functions instance has its own. Their promises (docs/design.md,
"The simulators honour idempotency keys...") are kept within one process only; a scaled-out app whose retry or undo
runs on another instance than the forward call meets a provider that never saw it. Pinned here as the docs say it
(docs/design.md, docs/deploy.md): a simulator shared between instances fails this test, and the docs must change
with it."""

from __future__ import annotations

from adapters.clock import ManualClock
from adapters.remote.interface import RemoteCall
from adapters.remote.services import remote_services
from settings import Settings

CHARGE = RemoteCall("payment", "charge", "o-1", "o-1:charge-payment", 1, {"amountCents": 1000})
REFUND = RemoteCall("payment", "refund", "o-1", "o-1:charge-payment:undo", 1, {}, fences_key="o-1:charge-payment")


def test_an_undo_on_another_instance_refunds_nothing_and_a_retry_there_charges_again() -> None:
    clock = ManualClock()
    instance_a = remote_services(Settings.from_env({}), clock)
    instance_b = remote_services(Settings.from_env({}), clock)
    charged = instance_a["payment"].call(CHARGE)
    assert charged["amountCents"] == 1000
    assert instance_b["payment"].call(REFUND) == {"refundId": None, "amountCents": 0}
    again = remote_services(Settings.from_env({}), clock)["payment"].call(CHARGE)  # the same key, a third instance
    assert again["amountCents"] == 1000 and again["chargeId"] is not None


def test_within_one_instance_the_undo_undoes_the_charge_and_fences_its_key() -> None:
    services = remote_services(Settings.from_env({}), ManualClock())
    charged = services["payment"].call(CHARGE)
    assert services["payment"].call(REFUND)["amountCents"] == charged["amountCents"] == 1000
