"""Reading the orchestrator state JSON the Durable SDK returns (``isDone``, ``actions``, ``output``,
``customStatus``, ``error``). Pure: no clock, no I/O.

Actions come back cumulative (every action yielded since the start of the history, in yield order),
nested for ``WhenAny``/``WhenAll`` in replay schema V2. ``flatten`` lists them depth-first, parents
before children; the SDK gives task ids (``TaskScheduled``/``TimerCreated`` event ids) to the
scheduling actions in exactly that order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

ACTION_TYPE_NAMES: dict[int, str] = {
    0: "CallActivity",
    1: "CallActivityWithRetry",
    2: "CallSubOrchestrator",
    3: "CallSubOrchestratorWithRetry",
    4: "ContinueAsNew",
    5: "CreateTimer",
    6: "WaitForExternalEvent",
    7: "CallEntity",
    8: "CallHttp",
    9: "SignalEntity",
    11: "WhenAny",
    12: "WhenAll",
}

COMPOUND_TYPES = frozenset({"WhenAny", "WhenAll"})
# Actions that consume a task id (a sequence number shared with the history's event ids).
SCHEDULING_TYPES = frozenset(
    {"CallActivity", "CallActivityWithRetry", "CreateTimer", "CallSubOrchestrator", "CallSubOrchestratorWithRetry"}
)

_OUT_OF_PROC_LABEL = "\n\n$OutOfProcData$:"


def type_name(action: Mapping[str, Any]) -> str:
    code = int(action["actionType"])
    return ACTION_TYPE_NAMES.get(code, f"Unknown({code})")


def flatten(actions: list[Any]) -> list[dict[str, Any]]:
    """Every action, depth-first, each a copy of the SDK's dict plus ``"type"`` (its name)."""
    return list(_walk(actions))


def _walk(items: list[Any]) -> Iterator[dict[str, Any]]:
    for item in items:
        if isinstance(item, list):  # episode groups (V1) and the single V2 group
            yield from _walk(item)
            continue
        named = {"type": type_name(item), **item}
        yield named
        if named["type"] in COMPOUND_TYPES:
            yield from _walk(list(item.get("compoundActions", [])))


@dataclass(frozen=True)
class OrchestratorState:
    """One replay's answer: what the orchestrator wants next, or how it ended."""

    is_done: bool
    actions: list[dict[str, Any]]  # flattened, see ``flatten``
    output: Any
    custom_status: Any
    error: str | None
    raw: dict[str, Any]

    @property
    def failed(self) -> bool:
        return self.error is not None

    def scheduling_actions(self) -> list[dict[str, Any]]:
        """The actions that take a task id, in task-id order."""
        return [a for a in self.actions if a["type"] in SCHEDULING_TYPES]


def parse_state(state_json: str) -> OrchestratorState:
    raw: dict[str, Any] = json.loads(state_json)
    return OrchestratorState(
        is_done=bool(raw.get("isDone", False)),
        actions=flatten(list(raw.get("actions", []))),
        output=raw.get("output"),
        custom_status=raw.get("customStatus"),
        error=raw.get("error"),
        raw=raw,
    )


def state_from_orchestrator_exception(error: Exception) -> OrchestratorState | None:
    """The SDK reports an orchestrator's unhandled exception by raising an ``Exception`` whose
    message ends with ``$OutOfProcData$:`` and the state JSON; the host reads that state."""
    text = str(error)
    label_at = text.find(_OUT_OF_PROC_LABEL)
    if label_at < 0:
        return None
    state = parse_state(text[label_at + len(_OUT_OF_PROC_LABEL) :])
    if state.error is None:
        return OrchestratorState(
            is_done=state.is_done,
            actions=state.actions,
            output=state.output,
            custom_status=state.custom_status,
            error=text[:label_at],
            raw=state.raw,
        )
    return state
