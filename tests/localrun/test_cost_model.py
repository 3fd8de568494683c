"""The cost model of ``cost_per_1m_orders_usd`` (localrun/prices.py) against figures computed by hand
for a small synthetic run, so that a change to the formula or to a price shows up here."""

from __future__ import annotations

from pathlib import Path

import pytest

from localrun.prices import (
    PRICES,
    ActivityPeriods,
    Usage,
    cost_per_1m_orders,
    instance_memory_mb,
    ru_per_operation,
    scaling_group,
)

# Two orders: 4 point reads, 10 writes, 2 queries of 3 KB items; 20 Service Bus operations;
# 10 executions (8 instant, one of 1 s, one of 2 s) at 2 GB, in 3 activity periods billed 1 s, 1 s and 2 s;
# 6 orchestrator episodes, 4 activities.
USAGE = Usage(
    orders=2,
    cosmos_reads=4,
    cosmos_writes=10,
    cosmos_queries=2,
    item_size_kb=3.0,
    servicebus_operations=20,
    executions=10,
    execution_seconds=[0.0] * 8 + [1.0, 2.0],
    period_billed_seconds=4.0,
    activity_periods=3,
    episodes=6,
    activities=4,
    memory_mb=2048,
)
PER_ORDER_SCALE = 1_000_000 / 2


def test_request_units_follow_the_documented_table_by_item_size():
    assert ru_per_operation(0.5) == (1.00, 4.95)  # below 1 KB: the 1 KB figures
    assert ru_per_operation(16) == pytest.approx((1.67, 9.52))
    assert ru_per_operation(3) == pytest.approx((1.09, 6.48))  # halfway between 2 KB and 4 KB
    assert ru_per_operation(256) == pytest.approx((19.9, 96.38))  # past the table: linear from 128 KB


def test_each_part_is_the_hand_computed_figure():
    cost = cost_per_1m_orders(USAGE)
    parts = cost["parts"]
    # RU: 4 x 1.09 + 10 x 6.48 + 2 x 3 (query) = 75.16 RU for 2 orders, at $0.25 per million RU
    assert parts["cosmos_ru"] == pytest.approx(75.16 * 0.25 / 1e6 * PER_ORDER_SCALE, abs=0.006)
    # 20 operations at $0.80 per million
    assert parts["servicebus_operations"] == pytest.approx(8.0)
    # 10 executions at $0.40 per million
    assert parts["function_executions"] == pytest.approx(2.0)
    # (8 x the 1 s minimum + 1 s + 2 s) x 2 GB = 22 GB-s at $0.000026
    assert parts["function_gb_s"] == pytest.approx(22 * 0.000026 * PER_ORDER_SCALE)
    # queue: 6 episodes x 2 + 4 activities x 4 = 28 at $0.004 per 10,000; table: 6 x 2 = 12 at $0.00036
    assert parts["durable_storage_transactions"] == pytest.approx(
        (28 * 0.004 / 10_000 + 12 * 0.00036 / 10_000) * PER_ORDER_SCALE, abs=0.006
    )
    # DTS: 6 + 4 = 10 actions at the placeholder $3 per million
    assert parts["durable_dts_actions"] == pytest.approx(15.0)
    assert cost["total"] == pytest.approx(9.395 + 8.0 + 2.0 + 286.0 + 5.816, abs=0.02)
    assert cost["total_with_dts"] == pytest.approx(9.395 + 8.0 + 2.0 + 286.0 + 15.0, abs=0.02)
    # the lower bound: the 3 periods' 4 billed seconds x 2 GB = 8 GB-s
    assert parts["function_gb_s_shared"] == pytest.approx(8 * 0.000026 * PER_ORDER_SCALE)
    assert cost["total_low"] == pytest.approx(9.395 + 8.0 + 2.0 + 104.0 + 5.816, abs=0.02)
    assert cost["total_with_dts_low"] == pytest.approx(9.395 + 8.0 + 2.0 + 104.0 + 15.0, abs=0.02)
    units = cost["units_per_order"]
    assert units["cosmos_ru"] == pytest.approx(37.58)
    assert units["function_gb_s"] == pytest.approx(11.0)
    assert units["function_gb_s_shared"] == pytest.approx(4.0)
    assert units["activity_periods"] == pytest.approx(1.5)
    assert units["dts_actions"] == 5


@pytest.mark.parametrize(
    ("duration", "billed"),
    [(0.0, 1.0), (0.05, 1.0), (0.999, 1.0), (1.0, 1.0), (1.2, 1.2), (1.23, 1.3), (2.01, 2.1)],
)
def test_an_execution_is_billed_as_flex_consumption_bills_it(duration, billed):
    """Flex Consumption: at least 1,000 ms, past that rounded up to the nearest 100 ms
    (https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan#billing). The model took the legacy
    Consumption plan's 100 ms as the minimum: a 50 ms orchestrator episode was billed a tenth of what Flex bills."""
    usage = Usage(**{**vars(USAGE), "executions": 1, "execution_seconds": [duration], "memory_mb": 1024})
    assert cost_per_1m_orders(usage)["units_per_order"]["function_gb_s"] == pytest.approx(billed / 2)


def test_the_costs_scale_with_operations_not_with_orders():
    doubled = cost_per_1m_orders(
        Usage(**{**vars(USAGE), "orders": 4, "cosmos_writes": 20, "cosmos_reads": 8, "cosmos_queries": 4})
    )
    assert doubled["parts"]["cosmos_ru"] == pytest.approx(cost_per_1m_orders(USAGE)["parts"]["cosmos_ru"], abs=0.01)
    assert doubled["parts"]["servicebus_operations"] == pytest.approx(4.0)  # same 20 operations over 4 orders


def test_memory_is_the_bicep_default(tmp_path: Path):
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "main.bicep").write_text("@description('x')\nparam instanceMemoryMB int = 4096\n")
    assert instance_memory_mb(tmp_path) == 4096
    assert instance_memory_mb(tmp_path / "missing") == 2048
    assert instance_memory_mb() in (512, 2048, 4096)  # the repository's own Bicep parses


def test_every_price_names_its_source_and_date_and_says_when_unconfirmed():
    for name, price in PRICES.items():
        assert price.source.startswith("https://"), name
        assert price.read_on == "2026-11-30", name
        assert price.usd > 0 and price.per >= 1, name
        if not price.confirmed:
            assert price.note, f"{name}: an unconfirmed price says what it rests on"


def _billed(*intervals: tuple[str, float, float]) -> tuple[float, dict[str, tuple[int, float, float]]]:
    """Folds ``(group, start, end)`` intervals as the host reports them: every start and end in time order. At equal
    times the ends of invocations under way come first (a touching one starts after the other ended), then the
    starts, then the ends of instant ones."""
    events: list[tuple[float, int, int, str]] = []  # (at, rank at equal times, 1 start / 0 end, group)
    for group, start, end in intervals:
        events.append((start, 1, 1, group))
        events.append((end, 0 if end > start else 2, 0, group))
    periods = ActivityPeriods()
    for at, _, starts, group in sorted(events):
        (periods.start if starts else periods.end)(group, at)
    return periods.billed_seconds(), periods.by_group()


@pytest.mark.parametrize(
    ("intervals", "billed", "periods"),
    [
        # overlapping: one period [0, 1.4], not 1 s + 1.1 s
        ([("d", 0.0, 0.5), ("d", 0.3, 1.4)], 1.4, 1),
        # nested: the outer one's 3 s
        ([("d", 0.0, 3.0), ("d", 1.0, 1.2)], 3.0, 1),
        # disjoint: two periods, each at least 1 s
        ([("d", 0.0, 0.2), ("d", 5.0, 5.05)], 2.0, 2),
        # touching: one ends as the other starts, one period of 1.25 s, rounded up to 1.3 s
        ([("d", 0.0, 0.6), ("d", 0.6, 1.25)], 1.3, 1),
        # instant episodes at one moment: one period at the 1 s minimum
        ([("d", 2.0, 2.0), ("d", 2.0, 2.0), ("d", 2.0, 2.0)], 1.0, 1),
        # ends in another order than the starts: [0, 2.01], 2.1 s
        ([("d", 0.0, 0.4), ("d", 0.1, 2.01), ("d", 0.2, 0.3)], 2.1, 1),
        # a gap after a period of several: [0, 1.5] and [1.6, 1.7]
        ([("d", 0.0, 1.0), ("d", 0.5, 1.5), ("d", 1.6, 1.7)], 2.5, 2),
        # the same intervals in two scaling groups: each group's own period
        ([("http", 0.0, 0.5), ("durable", 0.2, 0.4)], 2.0, 2),
        ([("http", 0.0, 1.5), ("durable", 0.2, 2.5), ("http", 1.0, 1.6)], 1.6 + 2.3, 2),
    ],
)
def test_a_scaling_group_is_billed_for_its_activity_periods(intervals, billed, periods):
    """The lower bound: each scaling group on one instance, billed for the union of its invocations' intervals, each
    period at least 1 s, else rounded up to 0.1 s (Flex's "billable activity period")."""
    total, by_group = _billed(*intervals)
    assert total == pytest.approx(billed)
    assert sum(n for n, _, _ in by_group.values()) == periods
    upper = sum(max(1.0, -(-round((end - start) * 10, 6) // 1) / 10) for _, start, end in intervals)
    assert total <= upper + 1e-9  # never above the per-invocation upper bound


def test_a_period_under_way_counts_to_its_latest_end_and_closes_only_when_idle():
    periods = ActivityPeriods()
    periods.start("durable", 0.0)
    periods.start("durable", 0.5)
    periods.end("durable", 1.7)
    assert periods.by_group()["durable"][:2] == (1, 1.7)
    assert periods.billed_seconds() == pytest.approx(1.7)
    periods.start("durable", 3.0)  # still under way (one in flight since 0.5): the same period
    periods.end("durable", 3.2)
    periods.end("durable", 3.4)
    periods.start("durable", 3.4)  # starts as the last ends: the same period
    periods.end("durable", 3.45)
    periods.start("durable", 9.0)
    periods.end("durable", 9.0)
    count, active, billed = periods.by_group()["durable"]
    assert count == periods.periods() == 2
    assert active == pytest.approx(3.45)
    assert billed == periods.billed_seconds() == pytest.approx(3.5 + 1.0)


def test_activity_out_of_time_order_or_an_end_without_a_start_is_refused():
    periods = ActivityPeriods()
    with pytest.raises(ValueError, match="never started"):
        periods.end("http", 1.0)
    periods.start("http", 2.0)
    with pytest.raises(ValueError, match="time order"):
        periods.end("http", 1.0)


def test_the_scaling_groups_follow_flex_per_function_scaling():
    assert scaling_group("submit_order_http", "httpTrigger") == "http"
    assert scaling_group("ops_api", "httpTrigger") == "http"
    assert scaling_group("blob_in", "blobTrigger") == "blob"
    assert {
        scaling_group(n, t)
        for n, t in [("o", "orchestrationTrigger"), ("a", "activityTrigger"), ("e", "entityTrigger")]
    } == {"durable"}
    assert scaling_group("intake", "serviceBusTrigger") == "function:intake"
    assert scaling_group("sweep", "timerTrigger") != scaling_group("intake", "serviceBusTrigger")
