"""The ops API's order page writes the app's times in ``domain.timefmt``'s one form (``...000000Z``): an attempt's
``createdTime`` and ``lastUpdatedTime`` were ``isoformat()``'s ``+00:00`` before session 63, beside every other time
of the page in ``Z`` (the answer's ``notBefore``: tests/operations/test_review_answer_delivery.py)."""

from __future__ import annotations

import json

import pytest

from adapters.remote.services import remote_services
from contracts.names import ORDERS_QUEUE
from tests.operations.harness import OpsHarness
from tests.submission.corpus import order
from tests.supervisor.test_one_time_form import ONE_FORM, other_forms

pytestmark = pytest.mark.cosmos


def test_the_order_page_writes_its_attempts_times_in_the_one_form(ops: OpsHarness) -> None:
    assert ops.ctx is not None
    ops.change_context(remote=remote_services(ops.ctx.settings, ops.clock, {}, seed=3))
    ops.send(ORDERS_QUEUE, json.dumps(order(orderId="o-times")), "o-times")
    ops.run_until_idle()
    status, page = ops.get("/api/ops/orders/o-times")
    assert status == 200 and page["state"]["processState"] == "Processed", page
    [attempt] = page["attempts"]
    assert ONE_FORM.fullmatch(attempt["createdTime"]) and ONE_FORM.fullmatch(attempt["lastUpdatedTime"]), attempt
    # the Durable history's own timestamps (``lastEvent.at``, a status's ``at``) too, however the extension wrote
    # them (tests/operations/test_redteam63_durable_history_times.py)
    assert other_forms(page) == [], page
