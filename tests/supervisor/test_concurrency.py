"""Two supervisors at once (a timer trigger can fire twice): driven step by step, each expired
attempt is counted exactly once and nothing another writer moved is resurrected."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.states import ProcessState
from supervisor.recovery import RecoveryAction, recover
from supervisor.scan import ScanState, scan_expired
from tests.deadlines import just_past
from tests.supervisor.conftest import expired, reclaim

pytestmark = pytest.mark.cosmos


def test_interleaved_supervisors_count_each_failure_once(make_ctx, states, clock):
    a, b = make_ctx(seed=1), make_ctx(seed=2)
    orders = ["o1", "o2", "o3", "o4"]
    for order_id in orders:
        expired(states, order_id, clock, timedelta(seconds=30))

    seen_by_a = scan_expired(states, ScanState(), a.settings, clock.now()).records
    seen_by_b = scan_expired(states, ScanState(), b.settings, clock.now()).records
    assert [r.order_id for r in seen_by_a] == [r.order_id for r in seen_by_b] == orders

    outcomes: dict[str, list[RecoveryAction]] = {o: [] for o in orders}
    for i, (record_a, record_b) in enumerate(zip(seen_by_a, seen_by_b, strict=True)):
        clock.advance(timedelta(seconds=1))
        first, second = ((a, record_a), (b, record_b)) if i % 2 == 0 else ((b, record_b), (a, record_a))
        outcomes[record_a.order_id].append(recover(*first).action)
        outcomes[record_a.order_id].append(recover(*second).action)

    assert all(o == [RecoveryAction.RECOVERED, RecoveryAction.SKIPPED] for o in outcomes.values())
    for order_id in orders:
        record = states.get(order_id)
        assert record is not None
        assert (record.process_state, record.failure_count) == (ProcessState.PENDING, 1)
        assert [h.event for h in record.history].count("RetryScheduled") == 1


def test_a_late_supervisor_does_not_touch_the_next_attempt(make_ctx, states, clock):
    a, b = make_ctx(seed=1), make_ctx(seed=2)
    expired(states, "o1", clock, timedelta(seconds=30))
    [stale] = scan_expired(states, ScanState(), b.settings, clock.now()).records
    [fresh] = scan_expired(states, ScanState(), a.settings, clock.now()).records
    assert recover(a, fresh).action is RecoveryAction.RECOVERED
    pending = states.get("o1")
    assert pending is not None and pending.complete_by is not None
    clock.set(pending.complete_by)
    reclaim(states, "o1", clock.now(), a.settings.start_grace)
    clock.advance(just_past(a.settings.start_grace))  # attempt 2 has expired too, but B still holds attempt 1

    result = recover(b, stale)

    assert result.action is RecoveryAction.SKIPPED
    assert result.expired_instance is None
    record = states.get("o1")
    assert record is not None
    assert (record.process_state, record.locked_by, record.failure_count) == (ProcessState.PROCESSING, "o1:2", 1)
