"""What a run would cost in Azure: the dated price table (the one place prices live) and the cost
model that turns a run's operation counts into ``cost_per_1m_orders_usd`` (docs/cost.md).

Every price carries its source and the date it was read. Where no stored copy of a source showed the
figure (Azure's pricing pages render their prices client-side), the entry says ``confirmed: False``
and what the figure rests on; replace it from the pricing page before relying on the total.

Modelled, not measured: the runner's Cosmos DB server answers 1 RU for every request, so request
units come from Microsoft's documented per-operation costs by item size (below) at the mean size of
the run's state records; function GB-s from the simulated duration of each invocation at the
configured instance memory (an upper bound), and from the activity periods of each scaling group as if it ran on one
instance (a lower bound: ``ActivityPeriods``); Durable backend work from the engine's episode and activity counts.
Monthly free grants, base charges (Service Bus Standard's hourly base) and idle polling are left
out: they do not scale with orders.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

READ_ON = "2026-11-30"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_INSTANCE_MEMORY_MB = 2048


@dataclass(frozen=True)
class Price:
    usd: float  # per ``per`` units
    per: int
    unit: str
    source: str
    read_on: str
    confirmed: bool
    note: str = ""

    @property
    def per_unit(self) -> float:
        return self.usd / self.per


PRICES: dict[str, Price] = {
    "cosmos_serverless_ru": Price(
        0.25,
        1_000_000,
        "request units (serverless account)",
        "https://azure.microsoft.com/pricing/details/cosmos-db/serverless/",
        READ_ON,
        False,
        "the stored copy of the pricing page shows no figure; $0.25 per million RU is the long-published "
        "serverless rate (US regions), not re-read here",
    ),
    "servicebus_standard_operation": Price(
        0.80,
        1_000_000,
        "operations, Standard tier, 13M-100M ops/month band",
        "https://azure.microsoft.com/pricing/details/service-bus/",
        READ_ON,
        False,
        "the USD page renders '$- per million operations'; the same band is ¥5.21 per million on "
        "https://www.azure.cn/en-us/pricing/details/service-bus/ (read 2026-11-30); the first 13M "
        "ops/month are included in the base charge (left out)",
    ),
    "flex_on_demand_gb_s": Price(
        0.000026,
        1,
        "GB-s of on-demand instance memory while executing",
        "https://modal.com/blog/azure-function-pricing-guide",
        READ_ON,
        True,
        "secondary source (May 2025, East US) quoting https://azure.microsoft.com/pricing/details/functions/; "
        "billing model: https://learn.microsoft.com/azure/azure-functions/functions-consumption-costs",
    ),
    "flex_on_demand_execution": Price(
        0.40,
        1_000_000,
        "executions (on demand)",
        "https://azure.microsoft.com/pricing/details/functions/",
        READ_ON,
        False,
        "the stored copies cut off before the execution rate; $0.40 per million is the published Flex "
        "on-demand rate as remembered, not re-read here",
    ),
    "storage_queue_transaction": Price(
        0.004,
        10_000,
        "queue operations (GPv2, LRS)",
        "https://azure.microsoft.com/pricing/details/storage/queues/",
        READ_ON,
        False,
        "no stored copy shows the figure; an upper figure used for every queue operation class",
    ),
    "storage_table_transaction": Price(
        0.00036,
        10_000,
        "table transactions (LRS)",
        "https://azure.microsoft.com/pricing/details/storage/tables/",
        READ_ON,
        False,
        "no stored copy shows the figure",
    ),
    "dts_consumption_action": Price(
        3.00,
        1_000_000,
        "actions, Durable Task Scheduler Consumption SKU",
        "https://azure.microsoft.com/pricing/details/durable-task-scheduler/",
        READ_ON,
        False,
        "PLACEHOLDER: no stored copy shows the per-action price; what an action is: "
        "https://learn.microsoft.com/azure/azure-functions/durable/durable-task-scheduler/durable-task-scheduler-billing",
    ),
}

# Request units per operation by item size (KB), session/eventual consistency, from
# https://learn.microsoft.com/azure/cosmos-db/understand-request-unit-consumption (read 2026-11-30).
# The write figures are for the default (index everything) policy; the app's containers exclude their
# bulky paths from indexing, so writes are over-estimated rather than under.
RU_BY_SIZE_KB: tuple[tuple[float, float, float], ...] = (
    (1, 1.00, 4.95),
    (2, 1.04, 6.29),
    (4, 1.14, 6.67),
    (8, 1.33, 7.04),
    (16, 1.67, 9.52),
    (32, 2.19, 11.23),
    (64, 4.76, 22.67),
    (128, 9.95, 48.19),
)
# Not documented per operation: a single-partition query page, assumed at 3 RU (an assumption).
QUERY_RU = 3.0
# Flex Consumption: "The minimum billable execution period for both execution modes is 1,000 ms. Past that, the
# billable activity period is rounded up to the nearest 100 ms."
# (https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan#billing). Flex bills an instance's
# activity period, in which invocations running at once count once; billing each invocation so is an upper bound
# (a period of several invocations is no longer than their sum, and no shorter than its longest); billing each
# scaling group's periods on one instance is a lower bound (``ActivityPeriods``). Before, this was
# the legacy Consumption plan's 100 ms, taken as "not documented for Flex": a run of short invocations (orchestrator
# episodes, state activities) came out at a tenth of its minimum.
MIN_EXECUTION_S = 1.0
BILLING_STEP_S = 0.1
# Azure Storage backend, per the task hub's queues and tables
# (https://learn.microsoft.com/azure/azure-functions/durable/durable-functions-azure-storage-provider):
# an orchestrator episode = control-queue get + delete, one history batch, one instance-row update;
# an activity = work-item queue put + get + delete, and its result's control-queue put.
QUEUE_OPS_PER_EPISODE = 2
TABLE_OPS_PER_EPISODE = 2
QUEUE_OPS_PER_ACTIVITY = 4


def billed_seconds(duration_s: float) -> float:
    """An execution of ``duration_s`` as Flex Consumption bills it: at least ``MIN_EXECUTION_S``, else rounded up to
    the next ``BILLING_STEP_S`` (in tenths, so that 1.2 s stays 1.2 s)."""
    tenths = math.ceil(round(duration_s / BILLING_STEP_S, 6))
    return max(MIN_EXECUTION_S, tenths * BILLING_STEP_S)


# Flex Consumption's per-function scaling (https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan#per-function-scaling):
# the HTTP triggers scale together on their own instances, so do the Blob triggers, and so do the Durable triggers
# (orchestrator, activity, entity); every other function scales alone. No instance runs two groups.
SHARED_SCALING_GROUPS = {
    "httpTrigger": "http",
    "blobTrigger": "blob",
    "orchestrationTrigger": "durable",
    "activityTrigger": "durable",
    "entityTrigger": "durable",
}


def scaling_group(function: str, trigger_type: str) -> str:
    """The Flex Consumption scaling group of a function, by its trigger: ``http``, ``blob``, ``durable``, else
    ``function:NAME`` (a group of its own)."""
    return SHARED_SCALING_GROUPS.get(trigger_type, f"function:{function}")


@dataclass
class _Group:
    in_flight: int = 0
    open_start: float | None = None  # the period under way: from its first start to its latest end so far
    open_end: float = 0.0
    last_at: float = float("-inf")  # the latest start or end seen (they must come in time order)
    periods: int = 0  # closed periods
    active_s: float = 0.0  # their lengths
    billed_s: float = 0.0  # and what Flex bills for them


class ActivityPeriods:
    """Each scaling group's activity periods, as if the group ran on one instance: the union of its invocations'
    intervals, folded as the invocations start and end (in time order, the ends in any order relative to the starts),
    in constant memory per group. A period is a stretch in which at least one invocation runs; two invocations that
    touch (one ends when the other starts) make one period. Each period is billed as Flex bills an activity period
    (``billed_seconds``: at least 1 s, else rounded up to 0.1 s). What Azure bills is at least this: scale-out
    spreads a group over more instances, whose periods together last at least as long and each carry the 1 s
    minimum (docs/cost.md)."""

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}

    def start(self, group: str, at: float) -> None:
        """An invocation of ``group`` starts at ``at`` (seconds on any fixed scale)."""
        g = self._groups.setdefault(group, _Group())
        self._in_order(g, at)
        if g.open_start is not None and g.in_flight == 0 and g.open_end < at:  # idle since: that period is over
            self._close(g)
        if g.open_start is None:
            g.open_start = g.open_end = at
        g.in_flight += 1

    def end(self, group: str, at: float) -> None:
        """An invocation of ``group`` that started (``start``) ends at ``at``."""
        g = self._groups.get(group)
        if g is None or g.in_flight == 0:
            raise ValueError(f"an invocation of {group!r} ends that never started")
        self._in_order(g, at)
        g.in_flight -= 1
        g.open_end = max(g.open_end, at)

    def by_group(self) -> dict[str, tuple[int, float, float]]:
        """(periods, active seconds, billed seconds) by group, the period under way counted as ending at its latest
        end so far."""
        totals: dict[str, tuple[int, float, float]] = {}
        for name, g in sorted(self._groups.items()):
            periods, active, billed = g.periods, g.active_s, g.billed_s
            if g.open_start is not None:
                periods += 1
                active += g.open_end - g.open_start
                billed += billed_seconds(g.open_end - g.open_start)
            totals[name] = (periods, active, billed)
        return totals

    def billed_seconds(self) -> float:
        """What Flex bills for every group's periods, in seconds (× the instance memory: the GB-s lower bound)."""
        return sum(billed for _, _, billed in self.by_group().values())

    def periods(self) -> int:
        return sum(periods for periods, _, _ in self.by_group().values())

    @staticmethod
    def _in_order(g: _Group, at: float) -> None:
        if at < g.last_at:
            raise ValueError(f"activity at {at} after one at {g.last_at}: starts and ends must come in time order")
        g.last_at = at

    @staticmethod
    def _close(g: _Group) -> None:
        assert g.open_start is not None
        length = g.open_end - g.open_start
        g.periods += 1
        g.active_s += length
        g.billed_s += billed_seconds(length)
        g.open_start = None


def ru_per_operation(size_kb: float) -> tuple[float, float]:
    """(read RU, write RU) for an item of ``size_kb``, linear between the documented sizes."""
    sizes = [row[0] for row in RU_BY_SIZE_KB]
    if size_kb <= sizes[0]:
        return RU_BY_SIZE_KB[0][1], RU_BY_SIZE_KB[0][2]
    if size_kb >= sizes[-1]:
        last = RU_BY_SIZE_KB[-1]
        return last[1] * size_kb / last[0], last[2] * size_kb / last[0]
    at = bisect.bisect_left(sizes, size_kb)
    (s0, r0, w0), (s1, r1, w1) = RU_BY_SIZE_KB[at - 1], RU_BY_SIZE_KB[at]
    f = (size_kb - s0) / (s1 - s0)
    return r0 + f * (r1 - r0), w0 + f * (w1 - w0)


def instance_memory_mb(root: Path = ROOT) -> int:
    """``instanceMemoryMB``: the Flex Consumption instance size the Bicep deploys (infra/main.bicep)."""
    try:
        text = (root / "infra" / "main.bicep").read_text()
    except OSError:
        return DEFAULT_INSTANCE_MEMORY_MB
    found = re.search(r"param\s+instanceMemoryMB\s+int\s*=\s*(\d+)", text)
    return int(found.group(1)) if found else DEFAULT_INSTANCE_MEMORY_MB


@dataclass(frozen=True)
class Usage:
    """A run's billable counts (totals over the run, not per order)."""

    orders: int
    cosmos_reads: int
    cosmos_writes: int
    cosmos_queries: int
    item_size_kb: float  # mean size of the items read and written
    servicebus_operations: int
    executions: int
    execution_seconds: Sequence[float]  # simulated duration of each invocation
    # ``ActivityPeriods.billed_seconds()`` and ``.periods()``: each scaling group's activity periods on one instance
    period_billed_seconds: float
    activity_periods: int
    episodes: int  # orchestrator episodes
    activities: int  # activity executions
    memory_mb: int


def cost_per_1m_orders(usage: Usage) -> dict[str, Any]:
    """Cost of a million orders like these, in USD, with its parts and the units behind them.
    ``total`` is the default deployment (Durable on the Azure Storage backend); ``total_with_dts``
    swaps that part for the Durable Task Scheduler's actions. Both count GB-s per invocation (``function_gb_s``,
    each execution billed alone: the upper bound); ``total_low`` and ``total_with_dts_low`` count them per activity
    period of each scaling group on one instance instead (``function_gb_s_shared``: the lower bound)."""
    scale = 1_000_000 / max(usage.orders, 1)
    read_ru, write_ru = ru_per_operation(usage.item_size_kb)
    ru = usage.cosmos_reads * read_ru + usage.cosmos_writes * write_ru + usage.cosmos_queries * QUERY_RU
    gb_s = sum(billed_seconds(s) for s in usage.execution_seconds) * usage.memory_mb / 1024
    gb_s_shared = usage.period_billed_seconds * usage.memory_mb / 1024
    queue_ops = usage.episodes * QUEUE_OPS_PER_EPISODE + usage.activities * QUEUE_OPS_PER_ACTIVITY
    table_ops = usage.episodes * TABLE_OPS_PER_EPISODE
    # DTS: one action per message dispatched to the app: each episode's trigger (start, activity
    # result, timer, event) and each activity's work item.
    actions = usage.episodes + usage.activities
    p = {k: v.per_unit for k, v in PRICES.items()}
    parts = {
        "cosmos_ru": ru * p["cosmos_serverless_ru"],
        "servicebus_operations": usage.servicebus_operations * p["servicebus_standard_operation"],
        "function_executions": usage.executions * p["flex_on_demand_execution"],
        "function_gb_s": gb_s * p["flex_on_demand_gb_s"],
        "function_gb_s_shared": gb_s_shared * p["flex_on_demand_gb_s"],
        "durable_storage_transactions": queue_ops * p["storage_queue_transaction"]
        + table_ops * p["storage_table_transaction"],
        "durable_dts_actions": actions * p["dts_consumption_action"],
    }
    parts = {k: v * scale for k, v in parts.items()}
    common = sum(v for k, v in parts.items() if not k.startswith(("durable_", "function_gb_s")))
    high, low = common + parts["function_gb_s"], common + parts["function_gb_s_shared"]
    per_order = {
        "cosmos_ru": ru / max(usage.orders, 1),
        "servicebus_operations": usage.servicebus_operations / max(usage.orders, 1),
        "function_executions": usage.executions / max(usage.orders, 1),
        "function_gb_s": gb_s / max(usage.orders, 1),
        "function_gb_s_shared": gb_s_shared / max(usage.orders, 1),
        "activity_periods": usage.activity_periods / max(usage.orders, 1),
        "storage_transactions": (queue_ops + table_ops) / max(usage.orders, 1),
        "dts_actions": actions / max(usage.orders, 1),
    }
    return {
        "total": round(high + parts["durable_storage_transactions"], 2),
        "total_with_dts": round(high + parts["durable_dts_actions"], 2),
        "total_low": round(low + parts["durable_storage_transactions"], 2),
        "total_with_dts_low": round(low + parts["durable_dts_actions"], 2),
        "parts": {k: round(v, 2) for k, v in parts.items()},
        "units_per_order": {k: round(v, 3) for k, v in per_order.items()},
        "assumptions": {
            "item_size_kb": round(usage.item_size_kb, 2),
            "instance_memory_mb": usage.memory_mb,
            "min_execution_s": MIN_EXECUTION_S,
            "billing_step_s": BILLING_STEP_S,
            "function_gb_s": "each invocation billed alone (the upper bound: invocations never share a period)",
            "function_gb_s_shared": "each scaling group on one instance, billed per activity period (the lower "
            "bound: scale-out adds instances and periods)",
            "query_ru": QUERY_RU,
            "ru": "modelled from documented per-operation costs (the local Cosmos server answers 1 RU)",
            "prices_read_on": READ_ON,
            "unconfirmed_prices": sorted(k for k, v in PRICES.items() if not v.confirmed),
        },
    }
