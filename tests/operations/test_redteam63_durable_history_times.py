"""Red team of session 63's one time form (times63): the order page's Durable history times.

times63 wrote an attempt's ``createdTime`` and ``lastUpdatedTime`` in ``timefmt``'s form but left ``lastEvent.at``
and each status sent's ``at`` as the extension wrote them. The extension writes a history ``Timestamp`` with up to
seven fractional digits and drops trailing zeros (``2026-01-01T08:00:05Z``, ``...:05.5Z``, ``...:05.1234567Z``),
so one page held two forms of one kind of value, and a client comparing the texts (createdTime against a status's
``at``, or two statuses) put ``...:05Z`` after ``...:05.300000Z``. The runner writes history timestamps in
``timefmt``'s form already, so the status reads here rewrite them as the extension writes them."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import azure.durable_functions as df
import pytest

from adapters.remote.services import remote_services
from contracts.names import ORDERS_QUEUE
from domain import timefmt
from operations.instances import history_time
from tests.operations.harness import OpsHarness
from tests.submission.corpus import order
from tests.supervisor.test_one_time_form import ONE_FORM, other_forms

pytestmark = pytest.mark.cosmos


def extension_text(moment: datetime) -> str:
    """A history ``Timestamp`` as the Durable extension writes it: seven fractional digits, trailing zeros dropped
    (none left: no point)."""
    fraction = f"{moment.microsecond:06d}0".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def test_the_extension_text_form() -> None:
    """The control: the rewrite gives the extension's forms, none of them ``timefmt``'s."""
    assert extension_text(timefmt.parse("2026-01-01T08:00:05.000000Z")) == "2026-01-01T08:00:05Z"
    assert extension_text(timefmt.parse("2026-01-01T08:00:05.500000Z")) == "2026-01-01T08:00:05.5Z"
    assert extension_text(timefmt.parse("2026-01-01T08:00:05.123456Z")) == "2026-01-01T08:00:05.123456Z"


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("2026-01-01T08:00:05Z", "2026-01-01T08:00:05.000000Z"),
        ("2026-01-01T08:00:05.5Z", "2026-01-01T08:00:05.500000Z"),
        ("2026-01-01T08:00:05.1234567Z", "2026-01-01T08:00:05.123456Z"),
        ("2026-01-01T08:00:05.5+00:00", "2026-01-01T08:00:05.500000Z"),
        ("t1", "t1"),  # not a moment: shown as it is
        ("2026-01-01T08:00:05", "2026-01-01T08:00:05"),  # no offset: not guessed
        (None, None),
    ],
)
def test_a_history_time_is_shown_in_the_one_form_or_as_it_is(written: Any, shown: Any) -> None:
    assert history_time(written) == shown


def test_the_order_page_shows_the_durable_history_times_in_the_one_form(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ops.ctx is not None
    ops.change_context(remote=remote_services(ops.ctx.settings, ops.clock, {}, seed=3))
    ops.send(ORDERS_QUEUE, json.dumps(order(orderId="o-hist")), "o-hist")
    ops.run_until_idle()
    read = df.DurableOrchestrationClient.get_status
    rewritten: list[str] = []

    async def as_the_extension_writes(self: Any, *args: Any, **kwargs: Any) -> Any:
        status = await read(self, *args, **kwargs)
        for event in getattr(status, "historyEvents", None) or []:
            if isinstance(event.get("Timestamp"), str):
                event["Timestamp"] = extension_text(timefmt.parse(event["Timestamp"]).replace(microsecond=500000))
                rewritten.append(event["Timestamp"])
        return status

    monkeypatch.setattr(df.DurableOrchestrationClient, "get_status", as_the_extension_writes)
    status, page = ops.get("/api/ops/orders/o-hist")
    assert status == 200 and page["state"]["processState"] == "Processed", page
    assert rewritten and all(not ONE_FORM.fullmatch(t) for t in rewritten), rewritten  # the control
    [attempt] = page["attempts"]
    assert page["statusesSent"], page
    assert ONE_FORM.fullmatch(attempt["lastEvent"]["at"]), attempt
    assert all(ONE_FORM.fullmatch(s["at"]) for s in page["statusesSent"]), page["statusesSent"]
    assert other_forms(page) == [], other_forms(page)
