"""Red team (compensation, session 65): undo order among the agents of a step whose outcome is unknown.

The charge was refused for good by the first provider (``payment``), the fallback (``payment-backup``) took it and its
reply was lost; the order is cancelled. Compensation logs one unknown-outcome undo per agent the step was started
with. They were logged the agent that last had the step first, so the walk (newest first) asked the first provider,
which never took the money, before the one that did: that refund refused for good (``CompensationFailed``), the round
stopped there, and the customer's money stayed at the fallback provider until an operator acted (``notUndone``), as
``CompensationFailed`` holds every entry the round did not reach. Undo order is the reverse of the forward actions:
the agent that last had the step, which most likely acted, is undone first. The real activities and agents over the
simulators and the Cosmos protocol server."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.service import SimulatedService
from domain.compensation import enter_compensation
from domain.states import ProcessState
from tests.compensation.support import forward_step, stored_record, submitted_and_claimed
from tests.compensation.test_redteam_undo_refused_for_good import _round

pytestmark = pytest.mark.cosmos

FORWARD = "o1:1"


def test_the_agent_that_last_had_the_step_is_undone_first(ctx, ledger, clock):
    payment = ctx.remote["payment"]
    assert isinstance(payment, SimulatedService)
    submitted_and_claimed(ctx)
    results: dict[str, Any] = {}
    forward_step(ctx, FORWARD, 1, "reserve-inventory", "inventory", results)
    payment.config = SimulatorConfig(permanent_error_rate=1.0)  # the card is refused at the first provider
    refused = forward_step(ctx, FORWARD, 1, "charge-payment", "payment", results)
    assert refused is not None and refused["outcome"] == "failed" and not refused["transient"], refused
    taken = forward_step(ctx, FORWARD, 1, "charge-payment", "payment-backup", results, tries=2)
    assert taken is not None and taken["outcome"] == "succeeded", taken  # its reply never reaches the attempt
    assert ledger.net("o1", "payment_backup").charged_cents > 0
    record = stored_record(ctx)
    assert record.steps["charge-payment"].agents == ["payment", "payment-backup"]
    ctx.states.replace(enter_compensation(record, "client", "cancelled by the client: changed mind", clock.now()))
    undos = [(e.seq, e.agent) for e in stored_record(ctx).compensation if e.step == "charge-payment"]
    # walked newest first: the fallback provider, which last had the step, first
    assert max(undos)[1] == "payment-backup", undos

    # the first provider refuses every refund for good (it still refuses everything)
    assert _round(ctx) == "CompensationFailed"
    failed = stored_record(ctx)
    assert failed.process_state is ProcessState.COMPENSATION_FAILED
    assert ledger.net("o1", "payment_backup").charged_cents == 0  # the customer's money was returned
    assert [e.agent for e in failed.compensation if e.outcome == "Undone"] == ["payment-backup"]
