"""Red team of the release of claims never tried: a duplicate submission of an order that has not begun.

A delivery that finds the order's record (a duplicate submission) says ``Received`` again while no step has begun:
nothing in the record's history but its creation, claims, the supervisor's retries of claims that never started and
an applied payment notification (``submission.intake._not_begun``, docs/design.md). A claim whose start its run never
tried is now released at once by that run (``StartNotTried``, ``orchestrators.starter.release_untried``), and one
whose start failed is released uncounted by the supervisor (``StartMissed``): retries of claims that never started,
which tell the submitter nothing. Either in the history made the order look begun, so a duplicate submission of an
order still waiting for its first step said nothing, where the same order with its claim still held (or retried as
``RetryScheduled``) was answered ``Received``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.state_store import update_once
from dependencies import AppContext
from domain import transitions
from domain.states import ProcessState
from orchestrators import starter
from orchestrators.names import SCHEDULER
from settings import Settings
from tests.contexts import context_with
from tests.submission.corpus import order
from tests.submission.test_intake import submit

pytestmark = pytest.mark.cosmos


def _untried(ctx: AppContext) -> None:
    """The sweep's claim of ``b``, its start never tried: released by the starter (the run's time for starts spent)."""
    claims = starter.sweep(ctx)
    assert [c.instance_id for c in claims] == ["b:1"]
    assert starter.release_untried(ctx, SCHEDULER, claims) == ["b:1"]


def _start_missed(ctx: AppContext) -> None:
    """The sweep's claim of ``b``, its start failed: released uncounted by the supervisor (a 404 for its instance)."""
    [claim] = starter.sweep(ctx)
    later = ctx.clock.now() + ctx.settings.start_grace + timedelta(seconds=1)
    record = ctx.states.get("b")
    assert record is not None
    update_once(ctx.states, record, lambda r: transitions.start_missed(r, claim.instance_id, later, later))


@pytest.mark.parametrize(("released", "event"), [(_untried, "StartNotTried"), (_start_missed, "StartMissed")])
def test_a_duplicate_says_received_again_after_a_claim_that_never_started_was_released(
    functions: Any, app_context: AppContext, sender: Any, released: Any, event: str
) -> None:
    full = context_with(app_context, settings=Settings.from_env({}, MAX_IN_FLIGHT="1"))
    submit(functions, order(orderId="a"))  # in flight: "b" is created Pending, over the cap
    submit(functions, order(orderId="b"))
    heard = [body["status"] for body in sender.bodies("client-statuses") if body["orderId"] == "b"]
    assert heard == ["Received"]

    roomy = context_with(full, settings=Settings.from_env({}, MAX_IN_FLIGHT="10"))
    released(roomy)
    record = roomy.states.get("b")
    assert record is not None and record.process_state is ProcessState.PENDING and record.steps == {}
    assert [e.event for e in record.history] == ["Received", "Claimed", event]

    submit(functions, order(orderId="b"))  # the submitter, not having heard, submits it again: nothing has begun

    heard = [body["status"] for body in sender.bodies("client-statuses") if body["orderId"] == "b"]
    assert heard == ["Received", "Received"]  # the same MessageId: collapsed if the first one did reach it
