"""What the engine keeps per orchestration instance: what Azure Storage keeps for the real host
(history, status, the inbox of messages not yet seen by the orchestrator, pending timers)."""

from __future__ import annotations

import pickle
import zlib
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
    # The history while the instance runs (read and extend it through ``history``); ``pack_history``
    # moves a finished instance's history into ``_packed_history``.
    _history: list[HistoryEvent] = field(default_factory=list, repr=False)
    _packed_history: bytes | None = field(default=None, repr=False)
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

    @property
    def history(self) -> list[HistoryEvent]:
        """The history events, oldest first. A running instance's list is the stored one (the
        engine appends to it); a packed (finished) instance's is a fresh copy on every read."""
        if self._packed_history is not None:
            events: list[HistoryEvent] = pickle.loads(zlib.decompress(self._packed_history))
            return events
        return self._history

    @property
    def history_is_packed(self) -> bool:
        return self._packed_history is not None

    def append_history(self, events: list[HistoryEvent]) -> None:
        if self._packed_history is not None:
            raise RuntimeError(f"instance {self.instance_id} is finished: its history is closed")
        self._history.extend(events)

    def restart_history(self) -> None:
        """``continue_as_new``: the new execution starts with an empty history."""
        self._history = []
        self._packed_history = None

    def pack_history(self) -> None:
        """Keep a finished instance's history compressed (about 1 KB instead of 30-50 KB of event
        objects): it is never replayed or appended to again, only read by the status query
        (``showHistory``: the ops API reads each attempt's events). Each event's cached JSON
        encodings are dropped first; ``history`` gives back equal events."""
        for event in self._history:
            event.forget_json_texts()
        self._packed_history = zlib.compress(pickle.dumps(self._history, protocol=pickle.HIGHEST_PROTOCOL))
        self._history = []
        self.scheduled = []  # only an episode checks it against the orchestrator's actions
