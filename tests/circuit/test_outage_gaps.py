"""A reopening by an agent whose clock runs behind the opener's by more than an outage's length (domain/circuit.py,
supervisor/outage.py), with ``OUTAGE_SETTLE_SECONDS`` 0 as with the settling period: it was dated (``openedAt``) at
or before the opening already paged, and was taken for it: never paged (with the settling period, the outage paged
never got its recovery either). An opening is now dated after every opening and closing the document holds,
whatever the opener's clock.

The agents' moves and the supervisor's runs against the Cosmos protocol server, the clocks moved by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.health_store import CosmosHealthStore, update_health
from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from domain.circuit import OUTAGE_ALERT, RECOVERY_ALERT
from supervisor.outage import alert_outages
from tests.circuit.support import closed, opened
from tests.contexts import context_with
from tests.fakes import RecordingSender

PERIOD = timedelta(seconds=30)  # the supervisor's
BEHIND = timedelta(seconds=200)  # agent B's clock against agent A's (and the supervisor's): more than an outage


@pytest.fixture
def health(cosmos_db: Any) -> CosmosHealthStore:
    return CosmosHealthStore(cosmos_db.get_container_client(STATE_CONTAINER))


@pytest.fixture
def ctx(app_context: Any, health: CosmosHealthStore) -> Any:
    return context_with(app_context, health=health)


def with_settle(ctx: Any, seconds: int) -> Any:
    return context_with(ctx, settings=replace(ctx.settings, outage_settle=timedelta(seconds=seconds)))


def agent_opens(store: Any, dependency: str, clock_reads: datetime) -> None:
    update_health(store, dependency, lambda h: (opened(h, clock_reads), None), clock_reads)


def agent_closes(store: Any, dependency: str, clock_reads: datetime) -> None:
    update_health(store, dependency, lambda h: (closed(h, clock_reads), None), clock_reads)


def sent(sender: RecordingSender) -> list[tuple[str, str, dict[str, Any]]]:
    """(MessageId, kind, details) of every operator alert sent, in order."""
    bodies = [(m.message_id, json.loads(m.body)) for q, m in sender.sent if q == OPERATOR_ALERTS_QUEUE]
    return [(i, b["kind"], b["details"]) for i, b in bodies]


def runs(ctx: Any, until: datetime) -> None:
    """The supervisor runs every period from its clock's time until ``until``."""
    while ctx.clock.now() <= until:
        alert_outages(ctx)
        ctx.clock.advance(PERIOD)


def a_reopening_dated_before_the_opening_paged(ctx: Any, health: Any) -> tuple[datetime, datetime]:
    """Agent A opens shipping's circuit at t0 (paged), closes it 40 s later; agent B, its clock 200 s behind,
    reopens it 20 s after that (its clock reading 180 s before t0) and closes it 40 s later. Returns t0 and the
    reopening's true time."""
    t0 = ctx.clock.now()
    agent_opens(health, "shipping", t0)
    runs(ctx, t0)
    agent_closes(health, "shipping", t0 + timedelta(seconds=40))
    reopened = t0 + timedelta(seconds=60)
    agent_opens(health, "shipping", reopened - BEHIND)
    runs(ctx, reopened + PERIOD)
    agent_closes(health, "shipping", reopened + timedelta(seconds=40) - BEHIND)
    return t0, reopened


@pytest.mark.cosmos
def test_a_reopening_by_an_agent_whose_clock_runs_behind_is_paged_as_a_new_outage(ctx, sender, health):
    """``OUTAGE_SETTLE_SECONDS`` 0: each closing is recovered and each reopening paged. Before, B's reopening, dated
    180 s before the opening paged, was taken for it: recovered at once and never paged."""
    ctx = with_settle(ctx, 0)
    t0, _reopened = a_reopening_dated_before_the_opening_paged(ctx, health)
    runs(ctx, ctx.clock.now() + 3 * PERIOD)
    alerts = sent(sender)
    assert [kind for _i, kind, _d in alerts] == [OUTAGE_ALERT, RECOVERY_ALERT, OUTAGE_ALERT, RECOVERY_ALERT]
    first, second = alerts[0][2]["outageStartedAt"], alerts[2][2]["outageStartedAt"]
    assert first == t0.isoformat() and second != first  # its own MessageId: never collapsed into the first's
    assert alerts[3][2]["outageStartedAt"] == second  # and its recovery
    assert len({i for i, _k, _d in alerts}) == 4
    assert all(d["outageSeconds"] is None or d["outageSeconds"] >= 0 for _i, _k, d in alerts[1::2])


@pytest.mark.cosmos
def test_a_reopening_by_an_agent_whose_clock_runs_behind_continues_the_outage_paged_and_its_recovery_covers_it(
    ctx, sender, health
):
    """With the settling period: B's reopening, 20 s after the closing, continues the outage paged; its one recovery
    covers both. Before, it was taken for an earlier outage: the outage paged never got its recovery, and a recovery
    of an outage never paged (B's opening) went out."""
    t0, _reopened = a_reopening_dated_before_the_opening_paged(ctx, health)
    runs(ctx, ctx.clock.now() + ctx.settings.outage_settle + 3 * PERIOD)
    alerts = sent(sender)
    assert [(kind, d["outageStartedAt"]) for _i, kind, d in alerts] == [
        (OUTAGE_ALERT, t0.isoformat()),
        (RECOVERY_ALERT, t0.isoformat()),
    ]
    assert alerts[1][2]["reopenings"] == 1
    assert alerts[1][2]["outageSeconds"] >= 40
