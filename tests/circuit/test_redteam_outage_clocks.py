"""Red team of openings dated forward (``domain.circuit.opening_after``): an opening is dated after every time the
health document holds, whatever the opener's clock, so the times of an agent whose clock runs ahead (or a time
edited by hand) carry on to every later opening. Closings are dated by the closer's clock (never moved forward to
their opening): the supervisor judges the settling period by its clock against the closing's, so a closing dated
ahead by another agent's opening held the recovery back by that agent's skew, the operator told the service had
recovered up to that much late (an hour ahead: an hour), for every outage until true time passed it. And a time
the document cannot hold (past ``domain.timefmt.LATEST``) is never written: the document stays readable.

The agents' moves and the supervisor's runs against the Cosmos protocol server, the clocks moved by hand."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.health_store import CosmosHealthStore, read_health, update_health
from domain.circuit import OUTAGE_ALERT, RECOVERY_ALERT, CircuitState
from domain.timefmt import LATEST, to_text
from order_agents.circuit_gate import DependencyGate
from tests.circuit.support import POLICY
from tests.circuit.test_outage_gaps import PERIOD, runs, sent
from tests.circuit.test_outage_settle import close_at as agent_closes
from tests.circuit.test_outage_settle import open_at as agent_opens
from tests.circuit.test_outage_settle import with_settle
from tests.contexts import context_with

AHEAD = timedelta(hours=1)  # the skewed agent's clock against the others' and the supervisor's
SETTLE = 300


@pytest.fixture
def ctx(app_context: Any, health: CosmosHealthStore) -> Any:
    return with_settle(context_with(app_context, health=health), SETTLE)


def recovered_by(ctx: Any, sender: Any, last_closing: datetime) -> list[tuple[str, str, Any]]:
    """The supervisor runs until the settling period and two of its periods after ``last_closing`` (true time):
    the alerts sent by then, as (kind, outage started, outageSeconds)."""
    runs(ctx, last_closing + timedelta(seconds=SETTLE) + 2 * PERIOD)
    return [(kind, d["outageStartedAt"], d.get("outageSeconds")) for _i, kind, d in sent(sender)]


@pytest.mark.cosmos
def test_an_outage_opened_by_an_agent_whose_clock_runs_ahead_is_recovered_a_settling_period_after_its_closing(
    ctx, sender, health
):
    """Agent A, its clock an hour ahead, opens payment's circuit (paged); agent B closes it a minute later. Before,
    the closing was dated at A's opening, an hour in the supervisor's future: no recovery for an hour."""
    t0 = ctx.clock.now()
    agent_opens(health, "payment", t0 + AHEAD)
    runs(ctx, t0)
    closing = t0 + timedelta(seconds=60)
    agent_closes(health, "payment", closing)
    alerts = recovered_by(ctx, sender, closing)
    started = to_text(t0 + AHEAD)
    assert [(kind, s) for kind, s, _l in alerts] == [(OUTAGE_ALERT, started), (RECOVERY_ALERT, started)]
    assert alerts[1][2] == 0  # its length is off by the skew, never below nothing
    assert read_health(health, "payment", ctx.clock.now()).last_closed_at == closing


@pytest.mark.cosmos
def test_a_later_outage_closed_by_agents_on_time_is_recovered_a_settling_period_after_its_closing(ctx, sender, health):
    """Agent A opens shipping's circuit (paged); agent B, its clock an hour ahead, closes it 40 s later; a minute
    after, A reopens it (dated just after B's closing: it continues the outage paged) and closes it 60 s later.
    Before, that closing too was dated an hour ahead: the recovery held back an hour."""
    t0 = ctx.clock.now()
    agent_opens(health, "shipping", t0)
    runs(ctx, t0)
    agent_closes(health, "shipping", t0 + timedelta(seconds=40) + AHEAD)
    runs(ctx, t0 + timedelta(seconds=100))
    agent_opens(health, "shipping", t0 + timedelta(seconds=100))
    runs(ctx, t0 + timedelta(seconds=160))
    closing = t0 + timedelta(seconds=160)
    agent_closes(health, "shipping", closing)
    alerts = recovered_by(ctx, sender, closing)
    assert [(kind, s) for kind, s, _l in alerts] == [(OUTAGE_ALERT, to_text(t0)), (RECOVERY_ALERT, to_text(t0))]
    assert alerts[1][2] >= 160  # to the reopening's date if later than the closing's: off by the skew


@pytest.mark.cosmos
def test_an_opening_after_the_latest_time_a_document_holds_leaves_it_readable(ctx, health):
    """``lastClosedAt`` edited by hand to the latest time a document holds: an opening dated after it could not be
    read back (before, the opening was written, and from then on every agent called the service anyway and the
    supervisor never read the document again). It is dated at that time: the circuit opens, the document stays
    readable."""
    now = ctx.clock.now()
    agent_opens(health, "inventory", now)
    agent_closes(health, "inventory", now + timedelta(seconds=40))
    update_health(health, "inventory", lambda h: (replace(h, last_closed_at=LATEST), None), now)
    gate = DependencyGate(health, ctx.clock, POLICY)
    for _ in range(POLICY.threshold):
        gate.failed("inventory")
    doc = read_health(health, "inventory", ctx.clock.now())
    assert doc.state is CircuitState.OPEN and doc.opened_at == LATEST
    assert not gate.admit("inventory")  # open: the agents fail fast


@pytest.mark.cosmos
def test_an_outage_too_old_to_page_gets_no_recovery_when_a_later_one_is_paged(ctx, sender, health):
    """The supervisor's first run in hours (a deployment, a long pause) finds payment's circuit open, and the outage
    before it closed two hours ago, never alerted: history (``OUTAGE_ALERT_MAX_AGE``), not paged. Before, once the
    open outage was paged, the old one's ``DependencyRecovered`` went out too: the operator, just paged that payment
    is down, was told it had recovered (after 1 min)."""
    t0 = ctx.clock.now()
    agent_opens(health, "payment", t0 - timedelta(hours=2))
    agent_closes(health, "payment", t0 - timedelta(hours=2) + timedelta(seconds=60))
    agent_opens(health, "payment", t0)
    runs(ctx, t0 + 3 * PERIOD)
    assert [(kind, s) for _i, kind, d in sent(sender) for s in [d["outageStartedAt"]]] == [(OUTAGE_ALERT, to_text(t0))]
    closing = ctx.clock.now()
    agent_closes(health, "payment", closing)
    alerts = recovered_by(ctx, sender, closing)
    assert [(kind, s) for kind, s, _l in alerts] == [(OUTAGE_ALERT, to_text(t0)), (RECOVERY_ALERT, to_text(t0))]
