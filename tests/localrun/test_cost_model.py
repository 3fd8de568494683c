"""The cost model of ``cost_per_1m_orders_usd`` (localrun/prices.py) against figures computed by hand
for a small synthetic run, so that a change to the formula or to a price shows up here."""

from __future__ import annotations

from pathlib import Path

import pytest

from localrun.prices import PRICES, Usage, cost_per_1m_orders, instance_memory_mb, ru_per_operation

# Two orders: 4 point reads, 10 writes, 2 queries of 3 KB items; 20 Service Bus operations;
# 10 executions (8 instant, one of 1 s, one of 2 s) at 2 GB; 6 orchestrator episodes, 4 activities.
USAGE = Usage(
    orders=2,
    cosmos_reads=4,
    cosmos_writes=10,
    cosmos_queries=2,
    item_size_kb=3.0,
    servicebus_operations=20,
    executions=10,
    execution_seconds=[0.0] * 8 + [1.0, 2.0],
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
    units = cost["units_per_order"]
    assert units["cosmos_ru"] == pytest.approx(37.58)
    assert units["function_gb_s"] == pytest.approx(11.0)
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
