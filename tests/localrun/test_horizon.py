"""A run that stops at its horizon with orders unsettled says so, and how to go on: a profile whose
settings bound throughput (a starter every 15 minutes with ``MAX_IN_FLIGHT`` 1, found by the fuzzer)
left 75 orders ``Pending`` after 8 simulated hours with only ``non_terminal 75`` to explain it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from contracts.names import ORDERS_QUEUE
from localrun.__main__ import main
from localrun.host import LocalHost
from localrun.profile import Profile
from localrun.report import build_report, summary
from localrun.simulation import SimulationConfig, run_simulation
from tests.localrun.conftest import task_threads

STORE_RETRY = ":store-retry:"  # a copy's MessageId (submission/store_outage.py)
SLOW_STARTS = {"settings": {"MAX_IN_FLIGHT": "1", "STARTER_SCHEDULE": "0 */15 * * * *"}}


def test_a_run_cut_by_its_horizon_says_so() -> None:
    config = SimulationConfig(orders=10, seed=1, profile=Profile.parse(SLOW_STARTS), horizon=timedelta(seconds=5))
    before = task_threads()
    report = build_report(run_simulation(config))
    assert task_threads() <= before  # the run's task threads, even those of work cut by the horizon, ended with it
    assert report["horizon_reached"] is True and report["horizon_s"] == 5
    # unsettled, and the orders it stopped before they were sent are not lost
    assert report["invariants"]["non_terminal"] > 0 and report["invariants"]["lost"] == 0
    assert report["simulated_s"] <= 5 + 1
    assert "stopped at its horizon" in summary(report) and "--horizon-hours" in summary(report)
    assert "orders not sent yet" in report["left_at_horizon"] and "orders not sent yet" in summary(report)
    # fuzz seed 8471: three reviews of an hour at a time held MAX_IN_FLIGHT 3, and 116 orders were left unsettled
    assert "REVIEW_TIMEOUT_SECONDS" in summary(report)


def test_a_run_that_settles_everything_does_not() -> None:
    report = build_report(run_simulation(SimulationConfig(orders=3, seed=1)))
    assert report["horizon_reached"] is False and report["invariants"]["non_terminal"] == 0
    assert "stopped at its horizon" not in summary(report)


@pytest.mark.parametrize("hours", ["0", "-1", "9000"])
def test_a_horizon_out_of_range_is_refused(hours: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--orders", "1", "--seed", "1", "--report", "out/x.json", "--horizon-hours", hours])
    assert exit_.value.code == 2
    assert "--horizon-hours" in capsys.readouterr().err


def test_a_run_stopped_before_its_horizon_does_not_say_it_reached_it() -> None:
    """``localrun serve`` stops when its developer says so (Ctrl-C), long before its 7-day horizon: orders
    still in flight then are not a horizon reached, and "raise --horizon-hours" (an option serve does not
    have) is no advice for it."""
    stopped: list[datetime] = []

    def stopped_at_once(
        host: LocalHost,
        horizon: datetime,
        _quiet: Callable[[], bool],
        _external: Callable[[], datetime | None],
        before_pump: Callable[[], None],
    ) -> None:
        before_pump()
        host.pump()
        stopped.append(horizon)

    config = SimulationConfig(orders=5, seed=1, horizon=timedelta(days=7), drive=stopped_at_once)
    report = build_report(run_simulation(config))
    assert stopped and report["invariants"]["non_terminal"] > 0  # stopped with work left
    assert report["horizon_reached"] is False
    assert "stopped at its horizon" not in summary(report)


def test_payment_notifications_the_horizon_stopped_are_not_unmatched() -> None:
    """Prepaid orders: a notification not sent yet when the horizon cut the run (or sent ahead of an order
    that was not) is unsettled with its order, not a notification the app lost."""
    prepaid = {**SLOW_STARTS, "orders": {"prepaid_rate": 1.0, "payment_notification_first_rate": 0.5}}
    config = SimulationConfig(orders=10, seed=1, profile=Profile.parse(prepaid), horizon=timedelta(seconds=5))
    report = build_report(run_simulation(config))
    assert report["horizon_reached"] is True and report["invariants"]["non_terminal"] > 0
    assert report["invariants"]["unmatched_notifications"] == 0


def test_messages_the_horizon_left_on_the_orders_queue_are_not_lost() -> None:
    """An order (or notification) that met a Cosmos DB error is handled again later from a scheduled copy
    (submission/store_outage.py); a horizon that cuts the run before that copy comes due leaves the order
    with no record yet: unsettled, not lost (all-faults, seed 3, 18 s: lost 1 and unmatched 2 before)."""
    profile = Profile.load("examples/profiles/all-faults.json")
    config = SimulationConfig(orders=60, seed=3, profile=profile, horizon=timedelta(seconds=18))
    result = run_simulation(config)
    queued = [m.message_id for m in result.broker.contents(ORDERS_QUEUE) if STORE_RETRY in m.message_id]
    report = build_report(result)
    assert queued and report["horizon_reached"] is True  # the case: copies scheduled past the horizon
    assert report["invariants"]["lost"] == 0 and report["invariants"]["unmatched_notifications"] == 0
    assert report["invariants"]["non_terminal"] > 0
