"""Red team (deadlines): an attempt that gives its step up on a transient failure (``release_for_retry``) or is
retired (``settle_retired_attempt``) ends with the record still in its name (``lockedBy``: the supervisor's
conditional write is the recovery), so ``past_due`` read it as held and left it ``SUPERVISOR_GRACE_SECONDS`` more
(15 s as deployed): every transient failure's retry waited the grace and up to a supervisor period more, though
no owner was left to protect. The release's ``completeBy`` is its time less the grace: the supervisor's next run
takes it, as the release says."""

from __future__ import annotations

from datetime import timedelta

import pytest

from activities import scheduler_steps
from contracts.activities import ReleaseForRetryInput, SettleRetiredInput
from domain.states import ProcessState
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.supervisor.conftest import claimed

pytestmark = pytest.mark.cosmos

DEPLOYED = "15"


def test_the_next_run_retries_an_attempt_released_on_a_transient_failure(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_GRACE_SECONDS=DEPLOYED)
    deadline = clock.now() + ctx.settings.step_timeout
    claimed(states, "o-rel", clock.now(), deadline)
    clock.advance(timedelta(seconds=20))
    released = ReleaseForRetryInput(
        order_id="o-rel", instance_id="o-rel:1", step="reserve-inventory", attempt=1, error="timeout"
    )
    assert scheduler_steps.release_for_retry(ctx, released).owned

    clock.advance(timedelta(seconds=1))  # the supervisor's next run
    report = run_supervisor(ctx, ScanState())

    assert (report.found, report.recovered) == (1, 1)
    record = states.get("o-rel")
    assert record is not None and (record.process_state, record.locked_by) == (ProcessState.PENDING, None)


def test_the_next_run_retries_a_retired_attempt(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_GRACE_SECONDS=DEPLOYED)
    claimed(states, "o-old", clock.now(), clock.now() + ctx.settings.step_timeout)
    clock.advance(timedelta(seconds=20))
    settled = scheduler_steps.settle_retired_attempt(
        ctx, SettleRetiredInput(order_id="o-old", instance_id="o-old:1", attempt=1)
    )
    assert settled.released

    clock.advance(timedelta(seconds=1))
    assert run_supervisor(ctx, ScanState()).recovered == 1
