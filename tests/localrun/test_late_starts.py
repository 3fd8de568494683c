"""A start the Durable backend took but recorded late (its instance unknown, a 404, when the supervisor reads it;
started later all the same) must cost the order nothing: no attempt counted, no step or undo run twice.

The runner's extension answers half of the starts with a 500 and starts their instances 50-100 s later
(``durable.late_start_rate``: on Azure Storage the start message is sent before the instance row is written, and
it waits on the queue for a row written after the client gave up). The supervisor reads ``Absent`` at the claim's
start grace and releases the attempt or round uncounted (``supervisor.recovery``, ``supervisor.compensation_rounds``),
its next claim a new instance; the instance that starts later must be fenced at its first write: it makes no write,
sends no agent request, charges nothing. Measured when the knob came (150 orders, seeds 2-4, with Durable outages,
two supervisors and starters, cancellations, lost Cosmos DB answers, hosts' clocks skewed, and Cosmos DB at 8-10 s a
request for two of them): every invariant 0, and every released instance that started later ended ``FencingLost``
(or was terminated first)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.cosmos

LATE: dict[str, Any] = {
    "durable": {"late_start_rate": 0.5, "late_start_ms": [50_000, 100_000]},
    "orders": {"cancel_rate": 0.3},
}


def test_a_start_recorded_late_is_released_uncounted_and_its_instance_fenced() -> None:
    result = run_simulation(SimulationConfig(orders=40, seed=1, profile=Profile.parse(LATE)))
    report = build_report(result)
    assert report["injected_faults"]["durable_starts_recorded_late"] > 0
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]
    assert report["recoveries"]["supervisor_retries"] == 0
    assert set(report["final_states"]) - {"Processed", "Compensated", "DeadLettered", "Rejected"} == set()

    released = {
        event["instanceId"]
        for event in result.events.named("SupervisorStartMissed", "SupervisorCompensationStartMissed")
    }
    assert any(":compensate:" in i for i in released) and any(":compensate:" not in i for i in released)
    # the late ones started after all: each ended at its first write, refused, or was terminated before it
    ended: Counter[str] = Counter()
    for instance_id in released:
        instance = result.host.engine.instance(instance_id)
        if instance is None:
            continue
        output = instance.output if isinstance(instance.output, dict) else {}
        ended[f"{instance.status.value} {output.get('result', '')}".strip()] += 1
    assert ended["Completed FencingLost"] > 0, ended
    assert set(ended) <= {"Completed FencingLost", "Terminated"}, ended
    # and wrote nothing: no move of the record is theirs
    assert [t for t in result.audit.transitions if t.by in released] == []
