"""The scan's bounds: per-run maximum, keyset paging with a cursor carried across runs, the window
and the catch-up pass, and the request charge logged per page and per run."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from domain.states import ProcessState
from domain.transitions import NO_GRACE
from supervisor.run import run_supervisor
from supervisor.scan import ScanState, scan_expired
from tests.supervisor.conftest import expired, reclaim

pytestmark = pytest.mark.cosmos


def _expired_orders(states, clock, count):
    """``count`` expired records, o00 the oldest deadline."""
    for i in range(count):
        expired(states, f"o{i:02d}", clock, timedelta(seconds=count - i))
    return [f"o{i:02d}" for i in range(count)]


def test_two_runs_recover_more_records_than_one_run_may_each_exactly_once(make_ctx, states, clock, caplog):
    ctx = make_ctx(SUPERVISOR_MAX_RECORDS="5", SUPERVISOR_PAGE_SIZE="2", MAX_FAILURES="3")
    orders = _expired_orders(states, clock, 8)
    scan = ScanState()
    caplog.set_level(logging.INFO, logger="orders")  # observability.events.app_event

    first = run_supervisor(ctx, scan)
    second = run_supervisor(ctx, scan)

    assert (first.found, first.recovered, first.finished) == (5, 5, False)
    # a catch-up (a process's first run): one page of records without a deadline (none), 5 expired records in pages
    # of 2, and one page of due compensations
    assert first.pages == 1 + 3 + 1
    assert (second.found, second.recovered, second.finished) == (3, 3, True)
    assert [i.split(":")[0] for i in first.to_terminate] == orders[:5]  # oldest deadline first
    recovered = [i.split(":")[0] for i in first.to_terminate + second.to_terminate]
    assert sorted(recovered) == orders  # all of them, none twice
    for order_id in orders:
        record = states.get(order_id)
        assert record is not None
        assert (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)

    pages = [r for r in caplog.records if getattr(r, "event", None) == "SupervisorScanPage"]
    assert len(pages) == first.pages + second.pages
    assert all(isinstance(r.requestCharge, float) for r in pages)
    runs = [r for r in caplog.records if getattr(r, "event", None) == "SupervisorRun"]
    assert [r.requestCharge for r in runs] == [first.request_charge, second.request_charge]
    assert first.request_charge == sum(r.requestCharge for r in pages[: first.pages])
    assert first.request_charge > 0
    queried = [r.query for r in pages[: first.pages]]
    assert queried == ["Processing"] * 4 + ["Compensating"]  # every page of the run, compensations too


def test_an_unfinished_scan_resumes_from_its_cursor_then_starts_over(make_ctx, states, clock):
    settings = make_ctx(SUPERVISOR_MAX_RECORDS="5", SUPERVISOR_PAGE_SIZE="2").settings
    orders = _expired_orders(states, clock, 8)
    scan = ScanState()

    first = scan_expired(states, scan, settings, clock.now())
    second = scan_expired(states, scan, settings, clock.now())
    third = scan_expired(states, scan, settings, clock.now())

    assert [r.order_id for r in first.records] == orders[:5]
    assert (first.finished, second.resumed, second.finished) == (False, True, True)
    assert [r.order_id for r in second.records] == orders[5:]  # carried on, nothing seen twice
    assert not third.resumed
    assert [r.order_id for r in third.records] == orders[:5]  # a finished scan starts over


def test_a_record_older_than_the_window_waits_for_the_catch_up_run(make_ctx, states, clock):
    ctx = make_ctx(SUPERVISOR_WINDOW_MINUTES="60", SUPERVISOR_CATCHUP_EVERY="3")
    scan = ScanState()
    first = run_supervisor(ctx, scan)  # a process's first run is a catch-up
    assert first.catch_up
    expired(states, "stranded", clock, timedelta(hours=2))
    expired(states, "recent", clock, timedelta(minutes=10))

    regular = run_supervisor(ctx, scan)

    assert not regular.catch_up
    assert regular.to_terminate == ["recent:1"]
    stranded = states.get("stranded")
    assert stranded is not None and stranded.process_state is ProcessState.PROCESSING

    catch_up = run_supervisor(ctx, scan)

    assert catch_up.catch_up
    assert catch_up.to_terminate == ["stranded:1"]
    stranded = states.get("stranded")
    assert stranded is not None and stranded.process_state is ProcessState.PENDING


class RejectingResumes:
    """The real store, except that every page after the first fails (as Cosmos DB
    answers a query it refuses with a 400)."""

    def __init__(self, store):
        self._store = store

    def expired_page(self, state, now, not_before, page_size, after, grace=NO_GRACE):
        if after is not None:
            raise RuntimeError("Cosmos DB 400: invalid continuation token")
        return self._store.expired_page(state, now, not_before, page_size, after, grace)

    def undated_page(self, state, page_size):
        return self._store.undated_page(state, page_size)


def test_a_refused_resume_does_not_wedge_later_runs(make_ctx, states, clock):
    settings = make_ctx(SUPERVISOR_MAX_RECORDS="2", SUPERVISOR_PAGE_SIZE="2").settings
    orders = _expired_orders(states, clock, 3)
    scan = ScanState()
    first = scan_expired(states, scan, settings, clock.now())
    assert scan.cursor is not None

    with pytest.raises(RuntimeError):
        scan_expired(RejectingResumes(states), scan, settings, clock.now())

    assert scan.cursor is None
    again = scan_expired(states, scan, settings, clock.now())
    assert [r.order_id for r in first.records] == [r.order_id for r in again.records] == orders[:2]


def test_runs_page_through_equal_deadlines_by_id_each_record_once(make_ctx, states, clock):
    """Equal deadlines (a burst of orders claimed in the same instant): the cursor keeps the last (completeBy,
    id), so the next run goes on after that id, not after the deadline (which would skip the rest of the tie)
    nor from it (which would read the tie again)."""
    ctx = make_ctx(SUPERVISOR_MAX_RECORDS="5", SUPERVISOR_PAGE_SIZE="2", MAX_FAILURES="3")
    orders = [f"t{i}" for i in (3, 0, 7, 5, 1, 6, 2, 4)]  # written out of id order
    for order_id in orders:
        expired(states, order_id, clock, timedelta(seconds=30))
    scan = ScanState()

    first = run_supervisor(ctx, scan)
    assert scan.cursor is not None and scan.cursor.after.id == "t4"
    second = run_supervisor(ctx, scan)

    assert [i.split(":")[0] for i in first.to_terminate] == ["t0", "t1", "t2", "t3", "t4"]
    assert [i.split(":")[0] for i in second.to_terminate] == ["t5", "t6", "t7"]
    assert second.finished and scan.cursor is None


def test_a_record_recovered_and_due_again_while_the_scan_is_unfinished_waits_for_the_next_scan(make_ctx, states, clock):
    """Run 1 recovers o00-o04 and leaves a cursor. Before run 2, o01 is claimed again by the starter and its
    new attempt's deadline passes too: run 2 goes on with run 1's query (its ``now``), which the new deadline is
    after, so run 2 does not see it; run 3, a fresh scan, recovers attempt 2. Each attempt is recovered once."""
    ctx = make_ctx(SUPERVISOR_MAX_RECORDS="5", SUPERVISOR_PAGE_SIZE="2", MAX_FAILURES="3")
    orders = _expired_orders(states, clock, 8)
    scan = ScanState()
    first = run_supervisor(ctx, scan)
    assert [i.split(":")[0] for i in first.to_terminate] == orders[:5]

    backoff = states.get("o01")
    assert backoff is not None and backoff.complete_by is not None
    clock.advance(max(backoff.complete_by - clock.now(), timedelta(0)) + timedelta(seconds=1))
    reclaim(states, "o01", clock.now(), timedelta(seconds=1))  # attempt 2, due in 1 s
    clock.advance(ctx.settings.supervisor_grace + timedelta(seconds=5))

    second = run_supervisor(ctx, scan)
    third = run_supervisor(ctx, scan)

    assert second.to_terminate == [f"{o}:1" for o in orders[5:]] and second.finished
    assert third.to_terminate == ["o01:2"]
    record = states.get("o01")
    assert record is not None and (record.process_state, record.failure_count) == (ProcessState.PENDING, 2)
