"""The sweep of owed notifications goes on from the last run's page (``supervisor.owed.deliver_due``,
``ScanState.owed``), against the Cosmos DB protocol server: failure records that stay owed at the head of
the query (their hour's resend window has passed, or they cannot be acknowledged) no longer hide the owed
records after them from every run."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore, update_once
from contracts.names import OPERATOR_ALERTS_QUEUE
from domain import transitions
from domain.states import ProcessState
from supervisor.owed import owe_notifications
from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.fakes import RecordingSender
from tests.supervisor.conftest import MakeContext

pytestmark = pytest.mark.cosmos

PAGE = 3


def failed(states: CosmosStateStore, order_id: str, clock: ManualClock, at_offset: timedelta) -> None:
    """``order_id`` failed by its attempt at now + ``at_offset``; its alert and status owed from then."""
    at = clock.now() + at_offset
    record = states.create(transitions.new_record(order_id, None, at))
    record = update_once(states, record, lambda r: transitions.claim(r, at, timedelta(seconds=60)))
    owner = str(record.locked_by)
    update_once(states, record, lambda r: owe_notifications(transitions.fail(r, owner, None, "declined", at)))


def test_owed_records_past_their_resend_window_do_not_hide_the_due_ones_behind_them(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender
) -> None:
    ctx = make_ctx(SUPERVISOR_MAX_RECORDS=str(PAGE))
    for n in range(PAGE + 1):  # owed 30 minutes: outside their hour's first 10 minutes, not resent now
        failed(states, f"o-old-{n}", clock, timedelta(minutes=-30, seconds=n))
    for n in range(2):  # owed a minute: due
        failed(states, f"o-new-{n}", clock, timedelta(minutes=-1, seconds=n))
    scan = ScanState()

    first = run_supervisor(ctx, scan)
    second = run_supervisor(ctx, scan)

    alerted = {a["orderId"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE)}
    assert alerted == {"o-new-0", "o-new-1"}, (first.notified, second.notified, alerted)
    for order_id in ("o-new-0", "o-new-1"):
        record = states.get(order_id)
        assert record is not None and record.process_state is ProcessState.ERROR
        assert record.complete_by is None  # acknowledged
    assert scan.owed == {}  # the query reached its end: the next run starts from the oldest again
    old = states.get("o-old-0")
    assert old is not None and old.complete_by is not None  # still owed: resent in its next hour's window
