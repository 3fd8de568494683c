"""Does a Durable backend that keeps failing page an operator, once, and a blip nobody? The ``durableBackendFailing``
log alert rule (infra/modules/alerts.bicep) run as Azure Monitor runs it (``tests/infra/log_alerts.py``) on the rows
Application Insights stores (``tests/observability/exported.py``) for what the app logs when its Durable calls fail:
the starter's starts (``start_orchestrations``), the supervisor's status reads (``read_statuses``) and the reply
relay's raises (``relay_reply``), made by the SDK's real client against the runner's Durable extension API, which
answers every call inside an outage window with the 500 the extension answers when its storage fails
(``localrun.hostile.DurableOutages``, the runner's ``durable.outages``).

Found: none of the app's Durable failure events paged anyone. The app copes with an outage (a failed start
released by the supervisor, a reply sent again in rounds), so a long one (the task hub's storage account throttled or
down) showed only as orders going to ``Error`` about 10 minutes in, each paged by ``ordersFailed`` without its
cause. Now the rule pages once when they go on in each of three 5-minute periods in a row; a blip touches two at
most."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.durable_client import bounded_client
from localrun.hostile import DurableOutages
from orchestrators.names import SCHEDULER
from orchestrators.starter import start_orchestrations
from order_agents.reply_relay import relay_reply
from supervisor.backend_wait import read_statuses
from tests.agents.support import START, StartClaim, make_context
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.infra.log_alerts import LogRule
from tests.localrun.real_durable_client import RealDurableClient
from tests.notifications.courier_clients import courier_client
from tests.observability.exported import exported

Event = tuple[float, str, dict[str, str]]  # minute logged, table, Properties

TICK = 0.5  # minutes: the starter's and the supervisor's timers run every 30 seconds


@pytest.fixture
def real() -> Iterator[RealDurableClient]:
    with courier_client(SCHEDULER) as (_, client):
        yield client


def _app_under(real: RealDurableClient, outages: list[tuple[float, float]], minutes: float) -> list[Event]:
    """``minutes`` of the app's Durable calls, the extension failing them inside ``outages`` ((start, length) in
    minutes): each tick a claim started and the status of the one before read, each minute a reply relayed; what
    Application Insights keeps, at the minute it was logged."""
    clock = ManualClock(START)
    counts: Counter[str] = Counter()
    real.api.before_answer = DurableOutages(tuple((s * 60, d * 60) for s, d in outages), clock.now, START, counts)
    client = bounded_client(real.client)
    ctx = make_context(clock, sender=RecordingSender())
    events: list[Event] = []
    tick = 0
    while tick * TICK <= minutes:
        minute = tick * TICK
        clock.set(START + timedelta(minutes=minute))
        claim = StartClaim(f"o-{tick}", f"o-{tick}:1")
        reply = {
            "type": "AgentReply",
            "schemaVersion": 1,
            "requestId": f"{claim.instance_id}:charge-payment:payment",
            "instanceId": claim.instance_id,
            "orderId": claim.order_id,
            "step": "charge-payment",
            "outcome": "succeeded",
        }
        with exported() as rows:
            real.run(start_orchestrations(client, SCHEDULER, [claim], timedelta(seconds=60)))
            real.run(read_statuses(client, [f"o-{max(tick - 1, 0)}:1"]))
            if tick % 2 == 0:
                real.run(relay_reply(client, FakeReceivedMessage.of(json.dumps(reply)), ctx))
        events += [(minute, row.table, row.properties) for row in rows]
        tick += 1
    assert counts["durable_calls_failed"] > 0 or not outages
    return events


def _counted(events: list[Event]) -> list[Event]:
    """The rows the rule's query keeps."""
    query = LogRule.of("durableBackendFailing").query
    return [e for e in events if query.run(e[1], [e[2]])]


def test_a_durable_outage_that_lasts_pages_once(real: RealDurableClient) -> None:
    """The extension failing every call from minute 12 to 52 (the task hub's storage down): one page, at the first
    evaluation whose three 5-minute periods all saw failures (20 to 25 minutes in: 25), none after while it lasts,
    nor once it is over."""
    events = _app_under(real, [(12, 40)], minutes=90)
    names = {e[2]["event"] for e in _counted(events)}
    assert {"StartFailed", "SupervisorStatusUnread", "ReplyRetryScheduled"} <= names, names
    assert all(12 <= e[0] < 52 for e in _counted(events))  # only the outage's calls count
    assert LogRule.of("durableBackendFailing").pages(events, until=90) == [(25, ())]


def test_a_blip_of_seconds_pages_nobody(real: RealDurableClient) -> None:
    """Failures for 40 seconds across the boundary between two 5-minute periods (14:56 to 15:36): the calls of
    15:00 and of 15:30 failed, one period each; three periods in a row do not see them. A rule on two 15-minute
    periods in a row would have paged it."""
    events = _app_under(real, [(14.94, 0.66)], minutes=45)
    counted = _counted(events)
    assert {e[0] for e in counted} == {15.0, 15.5}, counted
    rule = LogRule.of("durableBackendFailing")
    assert rule.pages(events, until=45) == []
    two_of_fifteen = replace(rule, frequency=15, window=15, periods=(2, 2))
    assert two_of_fifteen.pages(events, until=45) == [(30, ())]


def test_two_outages_far_apart_page_twice(real: RealDurableClient) -> None:
    """Stateful: resolved 15 minutes after the failures stop, so a second outage an hour later pages again."""
    events = _app_under(real, [(5, 15), (60, 15)], minutes=90)
    pages = LogRule.of("durableBackendFailing").pages(events, until=90)
    assert [minute for minute, _ in pages] == [15, 70]


def test_a_start_the_store_failed_is_not_the_durable_backend() -> None:
    """``StartFailed`` is logged for a claim the store failed too (``sweep``, ``try_claim``: no ``durableCall``): not
    counted."""
    query = LogRule.of("durableBackendFailing").query
    store = {"event": "StartFailed", "orderId": "o-1"}
    durable = {"event": "StartFailed", "orderId": "o-1", "instanceId": "o-1:1", "durableCall": "start"}
    assert query.run("AppTraces", [store]) == []
    assert len(query.run("AppTraces", [durable])) == 1


def test_a_claim_never_tried_counts_by_its_runs_phase_stopped_not_by_its_release() -> None:
    """A run whose time for starts was spent logs ``DurablePhaseStopped`` (phase ``starts`` or ``compensationStarts``)
    and releases each claim it never tried (``StartReleased``, ``CompensationStartReleased``: no Durable call made for
    it, a store write each). The rule counts the phase stopped, not the releases (as its description says); a claim
    whose release could not be written is left to the supervisor as a failed start (``durableCall`` ``start``),
    counted."""
    query = LogRule.of("durableBackendFailing").query
    stopped = {"event": "DurablePhaseStopped", "phase": "starts", "skipped": "3", "made": "8"}
    released = [
        {"event": "StartReleased", "orderId": "o-1", "instanceId": "o-1:1"},
        {"event": "CompensationStartReleased", "orderId": "o-2", "instanceId": "o-2:c1"},
    ]
    left = {"event": "CompensationStartFailed", "orderId": "o-3", "instanceId": "o-3:c1", "durableCall": "start"}
    assert query.run("AppTraces", released) == []
    assert len(query.run("AppTraces", [stopped, *released, left])) == 2
