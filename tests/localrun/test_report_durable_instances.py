"""The report's runtime section counts the Durable instances at the end of a run, per orchestrator and
runtime status: an attempt's instance left Running after its order ended shows there."""

from __future__ import annotations

from datetime import UTC, datetime

from azure.durable_functions import OrchestrationRuntimeStatus

from localrun.durable.instance import Instance
from localrun.report import durable_instance_counts

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _instance(instance_id: str, name: str, status: OrchestrationRuntimeStatus) -> Instance:
    return Instance(instance_id, name, 1, None, T0, T0, status)


def test_instances_are_counted_per_orchestrator_and_status() -> None:
    instances = [
        _instance("o1:1", "process_order_v4", OrchestrationRuntimeStatus.Completed),
        _instance("o2:1", "process_order_v4", OrchestrationRuntimeStatus.Running),
        _instance("o3:1", "process_order_v4", OrchestrationRuntimeStatus.Completed),
        _instance("o1:compensate:1", "compensate_order_v1", OrchestrationRuntimeStatus.Terminated),
    ]

    assert durable_instance_counts(instances) == {
        "compensate_order_v1": {"Terminated": 1},
        "process_order_v4": {"Completed": 2, "Running": 1},
    }
