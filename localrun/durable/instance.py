"""What the engine keeps per orchestration instance: what Azure Storage keeps for the real host
(history, status, the inbox of messages not yet seen by the orchestrator, pending timers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from azure.durable_functions import OrchestrationRuntimeStatus

from localrun.durable.history import HistoryEvent

FINISHED = frozenset(
    {
        OrchestrationRuntimeStatus.Completed,
        OrchestrationRuntimeStatus.Failed,
        OrchestrationRuntimeStatus.Terminated,
        OrchestrationRuntimeStatus.Canceled,
    }
)


@dataclass
class Instance:
    instance_id: str
    name: str
    execution: int  # bumps when start_new overwrites a finished instance: stale completions are dropped
    input_json: str | None
    created: datetime
    last_updated: datetime
    status: OrchestrationRuntimeStatus = OrchestrationRuntimeStatus.Pending
    history: list[HistoryEvent] = field(default_factory=list)
    inbox: list[HistoryEvent] = field(default_factory=list)  # new events for the next episode
    episode_queued: bool = False
    # task id -> action type name ("CallActivity", "CreateTimer"), the host's record of scheduled work
    scheduled: list[str] = field(default_factory=list)
    # task id -> fire time, for timers not yet fired nor cancelled
    pending_timers: dict[int, datetime] = field(default_factory=dict)
    output: Any = None
    custom_status: Any = None

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED
