"""The workload's late payment notifications (profile ``orders.late_notification_rate`` and
``late_notification_s``): a prepaid order's notification sent that long after its order, held up on its
way; a profile without them draws exactly the workload it drew before."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from localrun.profile import Profile, ProfileError
from localrun.workload import Workload, make_workload

START = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)


def workload(orders: dict[str, object]) -> Workload:
    return make_workload(30, Profile.parse({"orders": orders}), random.Random(3), START)


def delays(w: Workload) -> list[float]:
    """Seconds from each order to its notification."""
    submitted = {a.order_id: a.at for a in w.arrivals if a.kind == "order"}
    return [(a.at - submitted[str(a.order_id)]).total_seconds() for a in w.arrivals if a.kind == "notification"]


def test_every_late_notification_comes_within_its_window_after_its_order() -> None:
    late = delays(workload({"prepaid_rate": 1.0, "late_notification_rate": 1.0, "late_notification_s": [420, 480]}))
    assert len(late) == 30 and all(420 <= d <= 480 for d in late)


def test_without_the_keys_the_workload_is_the_one_drawn_before() -> None:
    plain = workload({"prepaid_rate": 0.5})
    assert all(abs(d) <= 10 for d in delays(plain))  # within ten seconds of the order, either side
    unused = workload({"prepaid_rate": 0.5, "late_notification_s": [420, 480]})  # no rate: nothing drawn
    assert [(a.at, a.message.message_id) for a in unused.arrivals] == [
        (a.at, a.message.message_id) for a in plain.arrivals
    ]


@pytest.mark.parametrize("window", [[480, 420], [-1, 5], [1], "300", [0, 100_000]])
def test_a_window_that_is_not_lo_hi_seconds_is_refused(window: object) -> None:
    with pytest.raises(ProfileError, match=r"orders\.late_notification_s"):
        Profile.parse({"orders": {"late_notification_s": window}})
