"""Host restarts in the runner come at irregular times, as a real host's do (scale-in, deployments,
platform upgrades). With exactly periodic restarts, a period that divides the 60 s message lock
(30 s) met a message redelivered after its lock lapsed at the same phase each time: all five of its
deliveries were killed by a restart and it was dead-lettered ``MaxDeliveryCountExceeded`` though
its order was processed (a fuzzed profile, seed 3824: 5 such dead letters in 30 orders)."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

from localrun.hostile import RestartGaps
from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# the fuzzed profile that found it (host restarts every 30 s, slow settlements, skewed agent clocks)
FUZZED = {
    "host": {"restart_every_s": 30, "clock_skew_s": {"agents": 21}},
    "servicebus": {"lock_expiry_rate": 0.006, "settle_latency_ms": [787, 4151]},
    "orders": {
        "malformed_rate": 0.175,
        "prepaid_rate": 0.074,
        "late_notification_rate": 0.152,
        "concurrent_notification_rate": 0.191,
        "duplicate_submit_rate": 0.202,
        "late_notification_s": [300, 300],
    },
    "starters": 3,
    "reply_queues": 8,
}


def _gaps(every_s: float, seed: str, count: int = 400) -> list[float]:
    gaps = RestartGaps(every_s, random.Random(seed))
    at, out = T0, []
    for _ in range(count):
        following = gaps.next_after(at)
        assert following is not None
        out.append((following - at).total_seconds())
        at = following
    return out


def test_restart_gaps_are_irregular_around_the_period() -> None:
    gaps = _gaps(30, "1:restarts")
    assert all(15 <= gap <= 45 for gap in gaps)
    assert len({round(gap, 3) for gap in gaps}) > 300  # not one period repeated
    assert 28 < sum(gaps) / len(gaps) < 32  # the profile's rate is kept on average
    assert sum(gap % 60 < 1 or gap % 60 > 59 for gap in gaps) < 10


def test_restart_gaps_are_seeded() -> None:
    assert _gaps(30, "7:restarts") == _gaps(30, "7:restarts")
    assert _gaps(30, "7:restarts") != _gaps(30, "8:restarts")


def test_no_restarts_without_a_period() -> None:
    assert RestartGaps(None, random.Random(1)).next_after(T0) is None


def test_restarts_do_not_kill_every_delivery_of_a_message() -> None:
    report = build_report(run_simulation(SimulationConfig(orders=30, seed=3824, profile=Profile.parse(FUZZED))))
    reasons = Counter(letter["reason"] for letter in report["dead_letters"])
    assert report["recoveries"]["host_restarts"] >= 8
    assert reasons["MaxDeliveryCountExceeded"] == 0
    assert not any(report["invariants"].values())
