"""Work items on the engine's queue (the task hub's control and work-item queues, in one FIFO)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodeWork:
    """Replay an instance over its history plus the new events in its inbox."""

    instance_id: str


@dataclass(frozen=True)
class ActivityWork:
    instance_id: str
    execution: int
    task_id: int
    name: str
    input_json: str | None
    # a late run: the work item of an activity whose result already reached the orchestration, run again
    # (``DurableEngine.rerun_after_completion``); its completion is a duplicate the orchestration ignores
    late: bool = False


WorkItem = EpisodeWork | ActivityWork


@dataclass(frozen=True)
class StepReport:
    """What one ``run_next`` did (for logs and counters)."""

    kind: str  # "episode" | "activity"
    instance_id: str
    name: str  # orchestrator or activity name
    outcome: str  # episode: the runtime status after it; activity: "completed" | "failed" | "dropped"
