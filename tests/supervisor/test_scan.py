"""The scan's bounds: per-run maximum, paging with a continuation carried across runs, the window
and the catch-up pass, and the request charge logged per page and per run."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from domain.states import ProcessState
from domain.transitions import NO_GRACE
from supervisor.run import run_supervisor
from supervisor.scan import ScanState, scan_expired
from tests.supervisor.conftest import expired

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
    assert first.pages == 3 + 1  # 5 expired records in pages of 2, and one page of due compensations
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
    assert queried == ["Processing"] * 3 + ["Compensating"]  # every page of the run, compensations too


def test_an_unfinished_scan_resumes_from_its_continuation_then_starts_over(make_ctx, states, clock):
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


class RejectingContinuations:
    """The real store, except that the service rejects every continuation token (as Cosmos DB
    answers a token it cannot use with a 400)."""

    def __init__(self, store):
        self._store = store

    def expired_page(self, state, now, not_before, page_size, continuation, grace=NO_GRACE):
        if continuation is not None:
            raise RuntimeError("Cosmos DB 400: invalid continuation token")
        return self._store.expired_page(state, now, not_before, page_size, continuation, grace)


def test_a_rejected_continuation_does_not_wedge_later_runs(make_ctx, states, clock):
    settings = make_ctx(SUPERVISOR_MAX_RECORDS="2", SUPERVISOR_PAGE_SIZE="2").settings
    orders = _expired_orders(states, clock, 3)
    scan = ScanState()
    first = scan_expired(states, scan, settings, clock.now())
    assert scan.cursor is not None

    with pytest.raises(RuntimeError):
        scan_expired(RejectingContinuations(states), scan, settings, clock.now())

    assert scan.cursor is None
    again = scan_expired(states, scan, settings, clock.now())
    assert [r.order_id for r in first.records] == [r.order_id for r in again.records] == orders[:2]
