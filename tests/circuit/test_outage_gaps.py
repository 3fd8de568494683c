"""Two ways an operator paged about a dependency's outage could miss an alert (domain/circuit.py,
supervisor/outage.py), with ``OUTAGE_SETTLE_SECONDS`` 0 as with the settling period:

- agents' clocks apart by more than an outage's length: a reopening written by an agent whose clock runs behind
  was dated (``openedAt``) at or before the opening already paged, and was taken for it: never paged (with the
  settling period, the outage paged never got its recovery either). An opening is now dated after every opening
  the document holds, whatever the opener's clock says;
- a ``DependencyOutage`` whose marker write failed, followed before the next run by that outage's closing and a
  whole other outage: the document no longer named the outage paged, and its recovery was never sent. The outage
  being paged is now recorded before the send (``outagePagingFor``): its recovery is owed even when later outages
  came and went.

The agents' moves and the supervisor's runs against the Cosmos protocol server, the clocks moved by hand."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.health_store import read_health
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.circuit import OUTAGE_ALERT, RECOVERY_ALERT
from domain.timefmt import to_text
from supervisor.outage import alert_outages
from tests.circuit.test_outage_settle import _FailingMarks, _MarkFailsAfter, with_settle
from tests.circuit.test_outage_settle import close_at as agent_closes
from tests.circuit.test_outage_settle import open_at as agent_opens
from tests.contexts import context_with
from tests.fakes import RecordingSender

PERIOD = timedelta(seconds=30)  # the supervisor's
BEHIND = timedelta(seconds=200)  # agent B's clock against agent A's (and the supervisor's): more than an outage


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
    assert first == to_text(t0) and second != first  # its own MessageId: never collapsed into the first's
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
        (OUTAGE_ALERT, to_text(t0)),
        (RECOVERY_ALERT, to_text(t0)),
    ]
    assert alerts[1][2]["reopenings"] == 1
    assert alerts[1][2]["outageSeconds"] >= 40


@pytest.mark.parametrize(
    ("settle", "gap", "expected"),
    [
        # each closing recovered, each opening paged: the first outage's recovery without a length (its closing is
        # no longer recorded), then the second's pair
        (0, 20, [(OUTAGE_ALERT, 0), (RECOVERY_ALERT, 0), (OUTAGE_ALERT, 60), (RECOVERY_ALERT, 60)]),
        # the second outage sooner than the settling period after the first's closing: it continues the first
        (300, 20, [(OUTAGE_ALERT, 0), (RECOVERY_ALERT, 0)]),
        # later than that after the first's opening: a new outage (the first one's closing is not recorded: a page
        # too many rather than one hidden)
        (300, 400, [(OUTAGE_ALERT, 0), (RECOVERY_ALERT, 0), (OUTAGE_ALERT, 440), (RECOVERY_ALERT, 440)]),
    ],
)
@pytest.mark.cosmos
def test_an_outage_paged_whose_marker_write_failed_gets_its_recovery_after_another_outage_came_and_went(
    ctx, sender, health, settle, gap, expected
):
    """The ``DependencyOutage`` goes out, its marker write fails; before the supervisor's next run the circuit
    closes, opens again ``gap`` s later and closes again. Before, the next run found the second outage only: the
    operator, paged the service was down, was never told the outage paged was over."""
    ctx = with_settle(ctx, settle)
    t0 = ctx.clock.now()
    failing = _FailingMarks(health)
    ctx = context_with(ctx, health=failing, sender=_MarkFailsAfter(sender, failing, OUTAGE_ALERT))
    agent_opens(health, "payment", t0)
    assert alert_outages(ctx) == 0  # the page sent, its marker write failed
    assert [kind for _i, kind, _d in sent(sender)] == [OUTAGE_ALERT]
    agent_closes(health, "payment", t0 + timedelta(seconds=40))
    agent_opens(health, "payment", t0 + timedelta(seconds=40 + gap))
    last_close = t0 + timedelta(seconds=80 + gap)
    agent_closes(health, "payment", last_close)
    ctx.clock.set(last_close + timedelta(seconds=5))
    runs(ctx, last_close + ctx.settings.outage_settle + 3 * PERIOD)
    alerts = sent(sender)
    # a resend of the page under its MessageId (dropped by duplicate detection) is one alert to the operator
    kept = list(dict.fromkeys((i, kind, d["outageStartedAt"]) for i, kind, d in alerts))
    assert [(kind, started) for _i, kind, started in kept] == [
        (kind, to_text(t0 + timedelta(seconds=offset))) for kind, offset in expected
    ]
    doc = read_health(health, "payment", ctx.clock.now())
    assert doc.last_outage_started_at is not None and doc.recovery_alerted_for == doc.last_outage_started_at


@pytest.mark.cosmos
def test_a_page_not_recorded_as_being_paged_is_not_sent_and_the_next_run_sends_it(ctx, sender, health):
    """The record before the send fails: nothing is sent (no recovery owed for it yet); the next run pages it."""
    failing = _FailingMarks(health)
    ctx = context_with(ctx, health=failing)
    agent_opens(health, "inventory", ctx.clock.now())
    failing.fail = 1
    assert alert_outages(ctx) == 0
    assert sent(sender) == []
    assert read_health(health, "inventory", ctx.clock.now()).outage_paging_for is None
    ctx.clock.advance(PERIOD)
    assert alert_outages(ctx) == 1
    doc = read_health(health, "inventory", ctx.clock.now())
    assert [kind for _i, kind, _d in sent(sender)] == [OUTAGE_ALERT]
    assert doc.outage_paging_for == doc.outage_alerted_for == doc.opened_at
