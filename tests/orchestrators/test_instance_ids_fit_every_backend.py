"""Every orchestration instance id the app builds fits both Durable backends the infra deploys.

The runner's engine refuses what the extension refuses (``DurableClient.StartNewAsync``: a leading ``@``; ``/``,
``\\``, ``#``, ``?`` or a control character; over 256 characters: ``localrun.durable.engine.instance_id_refusal``),
as Azure Storage takes it. The Durable Task Scheduler (``DURABLE_BACKEND=dts``, docs/deploy.md) is stricter and the
runner does not model it: instance ids of at most 100 characters, printable ASCII only (0x20-0x7E), none starting
with ``@`` ("Limitations and considerations", durable-task-scheduler). So the app's own ids are held to that here,
at their longest: an order id of 64 characters, the largest attempt or round, the longest status, any alert."""

from __future__ import annotations

import re
from typing import get_args

from contracts.messages import StatusName
from domain.compensation import compensation_instance_id
from domain.ids import MAX_ATTEMPT, alert_id, instance_id
from localrun.durable.engine import instance_id_refusal
from notifications.alerts import courier_instance_id
from notifications.status import OwedStatus

DTS_MAX_INSTANCE_ID = 100
_DTS_ID = re.compile(rf"[\x20-\x7e]{{1,{DTS_MAX_INSTANCE_ID}}}")
LONGEST_ORDER_ID = "O" * 64  # the longest id the contract accepts (ORDER_ID_PATTERN)


def fits_both_backends(instance: str) -> bool:
    return instance_id_refusal(instance) is None and bool(_DTS_ID.fullmatch(instance)) and not instance.startswith("@")


def test_attempts_and_compensation_rounds_fit() -> None:
    assert fits_both_backends(instance_id(LONGEST_ORDER_ID, MAX_ATTEMPT))
    assert fits_both_backends(compensation_instance_id(LONGEST_ORDER_ID, MAX_ATTEMPT))


def test_status_couriers_fit() -> None:
    for status in get_args(StatusName):
        owed = OwedStatus(LONGEST_ORDER_ID, status, MAX_ATTEMPT, "status-queue", variant=str(2**63 - 1))
        assert fits_both_backends(owed.instance_id), owed.instance_id


def test_alert_couriers_fit_whatever_a_discriminator_brings() -> None:
    """A discriminator may be a client's text (a payment notification's id: tabs, line breaks, ``/``, ``?``, letters
    past ASCII): the courier's id keeps only ``[A-Za-z0-9_:-]`` and a digest."""
    for discriminator in ("n/1?#x", "tab\there", "line\nbreak", "é漢🙂", "x" * 300, "@lead"):
        instance = courier_instance_id(alert_id("PaymentAmountMismatch", LONGEST_ORDER_ID, discriminator))
        assert fits_both_backends(instance), instance
