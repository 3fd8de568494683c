"""Red team (deadlines): a regular scan looks at ``completeBy >= now - SUPERVISOR_WINDOW_MINUTES``, but a record its
attempt still holds is due only ``SUPERVISOR_GRACE_SECONDS`` after its ``completeBy``. The window must count from
when a record became due: with a grace as long as the window (60 s, 1 minute), a held record was due on the
supervisor's clock only once its ``completeBy`` had left the window, and every regular run passed it over; it waited
for a catch-up run (every ``SUPERVISOR_CATCHUP_EVERY``-th)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.supervisor.conftest import claimed

pytestmark = pytest.mark.cosmos


@pytest.mark.parametrize("grace_s", ["15", "60", "90"])
def test_a_regular_run_finds_a_held_record_once_its_grace_passed(make_ctx, states, clock, grace_s):
    ctx = make_ctx(SUPERVISOR_GRACE_SECONDS=grace_s, SUPERVISOR_WINDOW_MINUTES="1")
    deadline = clock.now() + ctx.settings.step_timeout
    claimed(states, "o-held", clock.now(), deadline)
    scans = ScanState(catch_up_due=False)  # a regular run (the first of a process is a catch-up)

    clock.set(deadline + ctx.settings.supervisor_grace - timedelta(seconds=1))
    assert run_supervisor(ctx, scans).found == 0  # still its attempt's
    clock.set(deadline + ctx.settings.supervisor_grace + timedelta(seconds=1))
    report = run_supervisor(ctx, scans)

    assert (report.catch_up, report.found, report.recovered) == (False, 1, 1)
