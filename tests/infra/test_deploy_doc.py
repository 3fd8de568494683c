"""docs/deploy.md: the sample order is one the app accepts, and the sequence is complete."""

from __future__ import annotations

import json
import re

from contracts.messages import OrderSubmitted
from contracts.names import EXAMPLE_STATUS_QUEUE, ORDERS_QUEUE
from tests.infra.paths import ROOT

DOC = (ROOT / "docs" / "deploy.md").read_text()


def test_sample_order_is_a_valid_order_submitted():
    match = re.search(r"^order = (\{.*?^\})$", DOC, flags=re.MULTILINE | re.DOTALL)
    assert match, "no `order = {...}` sample in docs/deploy.md"
    order = OrderSubmitted.model_validate(json.loads(match.group(1)))
    assert order.reply_to == EXAMPLE_STATUS_QUEUE
    assert f'get_queue_sender("{ORDERS_QUEUE}")' in DOC


def test_sequence_has_every_azd_step_in_order():
    sequence = DOC[DOC.index("### The exact sequence") :]
    position = 0
    for step in ["azd auth login", "azd env new", "azd env set AZURE_LOCATION", "azd up", "azd down --purge"]:
        found = sequence.find(step, position)
        assert found != -1, f"{step!r} missing (or out of order) in the deploy sequence"
        position = found


def test_options_and_first_deploy_pitfalls_are_documented():
    for needed in (
        "azd env set VNET_ENABLED true",
        "azd env set DURABLE_BACKEND dts",
        "Premium",  # what the VNet option costs
        "403",  # role assignment propagation on the first deploy
        "preprovision",
        "python-313-changes",
        "supported-languages",
        "durable-task-scheduler-dedicated-sku",
        "Local development with the option on",
    ):
        assert needed in DOC, needed
    assert "Python 3.11" not in DOC
