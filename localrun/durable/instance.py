"""What the engine keeps per orchestration instance: what Azure Storage keeps for the real host
(history, status, the inbox of messages not yet seen by the orchestrator, pending timers)."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterable
from datetime import datetime
from typing import Any, SupportsIndex, TypeVar

from azure.durable_functions import OrchestrationRuntimeStatus

from localrun.durable.history import HistoryEvent
from localrun.packing import LearnedDictionary

FINISHED = frozenset(
    {
        OrchestrationRuntimeStatus.Completed,
        OrchestrationRuntimeStatus.Failed,
        OrchestrationRuntimeStatus.Terminated,
        OrchestrationRuntimeStatus.Canceled,
    }
)


# Packed histories: compressed with a dictionary learned once per process from the first three
# (``localrun.packing``). Histories are small and alike (the same event types, names and fields): about
# 450 bytes instead of 1.4 KB with zlib alone for an all-faults order's attempt.
HISTORIES_LEARN_FROM = 3
_DICTIONARY = LearnedDictionary(HISTORIES_LEARN_FROM)
_FIELDS = LearnedDictionary(8)  # (input, output, custom status) of finished instances, as one pickle


_T = TypeVar("_T")


class _ClosedList(list[_T]):
    """The empty list a finished instance holds for its inbox, scheduled work and live history,
    shared by every finished instance: nothing may be added to it (an engine bug would fail loudly
    instead of writing into every finished instance); clearing it is a no-op."""

    def append(self, item: _T, /) -> None:
        raise RuntimeError("a finished orchestration instance takes no new events or work")

    def extend(self, items: Iterable[_T], /) -> None:
        raise RuntimeError("a finished orchestration instance takes no new events or work")

    def insert(self, index: SupportsIndex, item: _T, /) -> None:
        raise RuntimeError("a finished orchestration instance takes no new events or work")


class _ClosedTimers(dict[int, datetime]):
    """The empty timer table every finished instance shares: no timer may be added to it."""

    def __setitem__(self, key: int, value: datetime, /) -> None:
        raise RuntimeError("a finished orchestration instance takes no new timers")


_NO_EVENTS: list[HistoryEvent] = _ClosedList()
_NO_WORK: list[str] = _ClosedList()
_NO_TIMERS: dict[int, datetime] = _ClosedTimers()


class Instance:
    """One orchestration instance. While it runs, everything is held as objects; once it finishes
    (``pack_history``), its history and its input, output and custom status are held as compressed
    bytes (one pickle each), and read back as equal values on demand."""

    __slots__ = (
        "_custom_status",
        "_history",
        "_input_json",
        "_output",
        "_packed_fields",
        "_packed_history",
        "created",
        "episode_queued",
        "execution",
        "inbox",
        "instance_id",
        "last_updated",
        "name",
        "pending_timers",
        "scheduled",
        "status",
    )

    def __init__(
        self,
        instance_id: str,
        name: str,
        execution: int,  # bumps when start_new overwrites a finished instance: stale completions are dropped
        input_json: str | None,
        created: datetime,
        last_updated: datetime,
        status: OrchestrationRuntimeStatus = OrchestrationRuntimeStatus.Pending,
    ) -> None:
        self.instance_id = instance_id
        self.name = sys.intern(name)  # one string for every instance of an orchestrator
        self.execution = execution
        self._input_json = input_json
        self.created = created
        self.last_updated = last_updated
        self.status = status
        # The history while the instance runs (read and extend it through ``history``); ``pack_history``
        # moves a finished instance's history into ``_packed_history``.
        self._history: list[HistoryEvent] = []
        self._packed_history: bytes | None = None
        # a finished instance's (input_json, output, custom_status), while they are packed
        self._packed_fields: bytes | None = None
        self.inbox: list[HistoryEvent] = []  # new events for the next episode
        self.episode_queued = False
        # task id -> action type name ("CallActivity", "CreateTimer"), the host's record of scheduled work
        self.scheduled: list[str] = []
        # task id -> fire time, for timers not yet fired nor cancelled
        self.pending_timers: dict[int, datetime] = {}
        self._output: Any = None
        self._custom_status: Any = None

    def __repr__(self) -> str:
        return (
            f"Instance(instance_id={self.instance_id!r}, name={self.name!r}, execution={self.execution}, "
            f"status={self.status!r})"
        )

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    # --- input, output and custom status: packed once the instance is finished -------------------

    def _fields(self) -> tuple[str | None, Any, Any]:
        if self._packed_fields is None:
            return self._input_json, self._output, self._custom_status
        data = self._packed_fields
        raw = _FIELDS.unpack(data)
        fields: tuple[str | None, Any, Any] = pickle.loads(raw)
        return fields

    def _unpack_fields(self) -> None:
        if self._packed_fields is not None:
            self._input_json, self._output, self._custom_status = self._fields()
            self._packed_fields = None

    @property
    def input_json(self) -> str | None:
        return self._fields()[0]

    @input_json.setter
    def input_json(self, value: str | None) -> None:
        self._unpack_fields()
        self._input_json = value

    @property
    def output(self) -> Any:
        return self._fields()[1]

    @output.setter
    def output(self, value: Any) -> None:
        self._unpack_fields()
        self._output = value

    @property
    def custom_status(self) -> Any:
        return self._fields()[2]

    @custom_status.setter
    def custom_status(self, value: Any) -> None:
        self._unpack_fields()
        self._custom_status = value

    @property
    def fields_are_packed(self) -> bool:
        return self._packed_fields is not None

    # --- history ------------------------------------------------------------------------------

    @property
    def history(self) -> list[HistoryEvent]:
        """The history events, oldest first. A running instance's list is the stored one (the
        engine appends to it); a packed (finished) instance's is a fresh copy on every read."""
        if self._packed_history is not None:
            events: list[HistoryEvent] = pickle.loads(_DICTIONARY.unpack(self._packed_history))
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
        """Keep a finished instance's history compressed (about 0.5 KB instead of 30-50 KB of event
        objects; ``localrun.packing``): it is never replayed or appended to again, only read by the status query
        (``showHistory``: the ops API reads each attempt's events). Each event's cached JSON
        encodings are dropped first; ``history`` gives back equal events. Its input, output and
        custom status are packed too (one pickle, compressed with its own learned dictionary): only the status
        query reads them, and gets back equal values."""
        for event in self._history:
            event.forget_json_texts()
        self._packed_history = _DICTIONARY.pack(pickle.dumps(self._history, protocol=pickle.HIGHEST_PROTOCOL))
        # Its live history, inbox, scheduled work and timers are empty for good: one shared closed
        # list or table for every finished instance instead of four empty ones each (~230 bytes).
        self._history = _NO_EVENTS
        self.inbox = _NO_EVENTS
        self.scheduled = _NO_WORK  # only an episode checks it against the orchestrator's actions
        self.pending_timers = _NO_TIMERS
        if self._packed_fields is None:
            raw = pickle.dumps((self._input_json, self._output, self._custom_status), protocol=pickle.HIGHEST_PROTOCOL)
            self._packed_fields = _FIELDS.pack(raw)
            self._input_json = self._output = self._custom_status = None
