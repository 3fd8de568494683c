"""An upgrade over instances in flight, with histories the older releases' code really recorded.

``recorded_histories.json.gz`` holds orchestration histories recorded by the code of earlier commits
(``recordedBy``), each run under fault profiles in the local runner and cut at its horizon
(``tools/record_histories.py``): attempts (``process_order_v4``, and ``process_order_v3``, which a release keeps
running for its instances in flight, recorded by 70b9094 when it was the current one), compensation rounds and
status and alert couriers (b583805's: final statuses on their timers while a status queue was full, each try failing
on the ``Received`` owed before it, replayed by the code that counts those tries apart),
their activity inputs and results as those commits' activities answered them, their timers and raised events.
The other replay tests build their histories by hand, with what the author of the change knew the older code
did; these are what it did.

Every episode of every history is replayed with the code of the day as the extension hands it an instance caught
there by a deployment: the events up to the episode's new ones, through the Durable SDK's own replay and the
extension's replay of the actions (``localrun.durable.action_replay``). It must schedule the activities and
timers the older code scheduled in that episode, end where it ended with the same output, and nothing the
extension would report non-deterministic (docs/design.md, "Versions"). A change that fails this needs a new
orchestrator name or a flag in the instance's input, and the histories of the release that made it are recorded
here too."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from localrun.durable import history as ev
from localrun.durable.action_replay import parse_timespan, replay_actions
from localrun.durable.actions import SCHEDULING_TYPES
from localrun.durable.history import EventType, HistoryEvent, parse_timestamp
from localrun.durable.replay import replay

RECORDED = Path(__file__).with_name("recorded_histories.json.gz")
SCHEDULED = {EventType.TASK_SCHEDULED: "CallActivity", EventType.TIMER_CREATED: "CreateTimer"}
MAXIMUM_TIMER = parse_timespan(str(ev.AZURE_STORAGE_CONTEXT.maximum_short_timer))


def recorded() -> list[dict[str, Any]]:
    histories: list[dict[str, Any]] = json.loads(gzip.decompress(RECORDED.read_bytes()))
    return histories


def event(data: dict[str, Any]) -> HistoryEvent:
    fields = dict(data)
    kind = EventType(fields.pop("EventType"))
    task_id = fields.pop("EventId")
    fields.pop("IsPlayed")
    return HistoryEvent(kind, parse_timestamp(fields.pop("Timestamp")), task_id, fields)


@dataclass(frozen=True)
class Episode:
    number: int
    seen: list[HistoryEvent]  # the history the extension hands the code: up to this episode's new events
    scheduled: list[tuple[str, str | None]]  # what the recorded code scheduled in it: (action type, activity)
    ended: HistoryEvent | None  # ExecutionCompleted, if the recorded instance ended in it


def episodes(events: list[HistoryEvent]) -> Iterator[Episode]:
    starts = [i for i, e in enumerate(events) if e.type is EventType.ORCHESTRATOR_STARTED]
    for number, start in enumerate(starts):
        stop = starts[number + 1] if number + 1 < len(starts) else len(events)
        episode = events[start:stop]
        if any(e.type is EventType.EXECUTION_TERMINATED for e in episode):
            return  # the extension ends a terminated instance without running its code
        first_action = next(
            (i for i, e in enumerate(episode) if e.type in SCHEDULED or e.type is EventType.ORCHESTRATOR_COMPLETED),
            len(episode),
        )
        yield Episode(
            number,
            events[: start + first_action],
            [(SCHEDULED[e.type], e.fields.get("Name")) for e in episode[first_action:] if e.type in SCHEDULED],
            next((e for e in episode if e.type is EventType.EXECUTION_COMPLETED), None),
        )


def test_the_recorded_histories_span_the_releases_and_the_orchestrators() -> None:
    histories = recorded()
    assert {h["recordedBy"] for h in histories} >= {"70b9094", "36c310f", "a1dfc93", "6155b2d", "b583805"}
    assert {h["name"] for h in histories} >= {
        "process_order_v3",
        "process_order_v4",
        "compensate_order_v1",
        "deliver_status_v1",
    }
    assert any(h["history"][-1]["EventType"] != EventType.EXECUTION_COMPLETED for h in histories)  # some in flight


@pytest.mark.parametrize("recorded_by", ["70b9094", "36c310f", "a1dfc93", "6155b2d", "b583805"])
def test_every_episode_of_a_history_an_older_release_recorded_replays_to_what_it_did(
    functions: dict[str, Any], recorded_by: str
) -> None:
    problems: list[str] = []
    replayed = 0
    for history in (h for h in recorded() if h["recordedBy"] == recorded_by):
        where = f"{history['name']} {history['instanceId']}"
        events = [event(e) for e in history["history"]]
        for episode in episodes(events):
            problem = replay_episode(functions[history["name"]].func, history, episode)
            replayed += 1
            if problem is not None:
                problems.append(f"{where}, episode {episode.number}: {problem}")
                break
    assert replayed > 100
    assert problems == []


def replay_episode(orchestrator: Any, history: dict[str, Any], episode: Episode) -> str | None:
    """What the code of the day does differently from the recorded code in ``episode`` (None: nothing)."""
    context = ev.context_json(history["instanceId"], history["input"], episode.seen)
    state = replay(orchestrator, context)
    extension = replay_actions(state.raw.get("actions", []), episode.seen, maximum_timer=MAXIMUM_TIMER)
    if extension.non_determinism is not None:
        return f"non-deterministic: {extension.non_determinism}"
    ended_failed = episode.ended is not None and episode.ended.fields.get("OrchestrationStatus") == "Failed"
    if state.error is not None and not ended_failed:
        return f"failed: {state.error[:500]}"
    known = sum(1 for e in episode.seen if e.type in SCHEDULED)
    scheduling = [a for a in state.actions if a["type"] in SCHEDULING_TYPES]
    now = [(a["type"], a.get("functionName")) for a in scheduling[known : max(known, extension.invoked)]]
    if now != episode.scheduled:
        return f"scheduled {now}, the recorded code {episode.scheduled}"
    if episode.ended is not None and not ended_failed:
        if not state.is_done:
            return "did not end where the recorded code ended"
        recorded_output = json.loads(episode.ended.fields.get("Result") or "null")
        if state.output != recorded_output:
            return f"ended with {state.output!r}, the recorded code with {recorded_output!r}"
    return None
