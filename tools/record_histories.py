"""Record the Durable histories a release's code makes, for the replay test of later releases
(``tests/orchestrators/test_recorded_histories_replay.py``, docs/design.md "Versions").

Run it with the code of the release to record, from a worktree of that release (this file is not in older
releases: give its path), with the venv of the repository::

    git worktree add --detach /tmp/rel <ref> && cd /tmp/rel
    /path/to/.venv/bin/python /path/to/tools/record_histories.py OUT.json --ref <ref> \\
        --profile examples/profiles/all-faults.json [--profile ...] [--orders 80] [--seed 5] [--hours 0.05]

Each profile is one local-runner simulation (``localrun.simulation.run_simulation``) cut at its horizon; every
orchestration instance the emulated extension holds then, finished or not, is recorded with its input and its
history (the extension's events, as the context JSON carries them). One instance per distinct course (its
orchestrator, the activities, timers and events it went through, and how it ended) is kept. A finished
history holds every episode: the replay test replays each episode's prefix, which is what the extension hands
the code deployed over an instance caught there."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, ".")  # the release under the current directory, not this file's

# the history event types that make an instance's course (TaskScheduled, TaskFailed, TimerCreated,
# EventRaised, ExecutionTerminated, ExecutionCompleted)
_COURSE = {4: "Name", 6: None, 10: None, 15: "Name", 3: None, 1: "OrchestrationStatus"}


def _course(instance: dict[str, Any]) -> str:
    marks = [
        (e["EventType"], e.get(_COURSE[e["EventType"]] or "", ""))
        for e in instance["history"]
        if e["EventType"] in _COURSE
    ]
    return json.dumps([instance["name"], marks])


def record(profile: str, orders: int, seed: int, hours: float) -> list[dict[str, Any]]:
    import localrun.simulation as sim
    from localrun.host import LocalHost
    from localrun.profile import Profile

    found: list[dict[str, Any]] = []
    close = LocalHost.close

    def recording_close(host: Any) -> None:
        for instance_id, instance in host.engine._instances.items():
            found.append(
                {
                    "instanceId": instance_id,
                    "name": instance.name,
                    "input": instance.input_json,
                    "history": [e.to_json(is_played=False) for e in instance.history],
                }
            )
        close(host)

    LocalHost.close = recording_close  # type: ignore[method-assign,assignment]
    try:
        config = sim.SimulationConfig(
            orders=orders, seed=seed, profile=Profile.load(profile), horizon=datetime.timedelta(hours=hours)
        )
        sim.run_simulation(config)
    finally:
        LocalHost.close = close  # type: ignore[method-assign]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ref", required=True, help="the commit recorded (kept with each history)")
    parser.add_argument("--profile", action="append", required=True)
    parser.add_argument("--orders", type=int, default=80)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--hours", type=float, default=0.05)
    args = parser.parse_args()
    kept: dict[str, dict[str, Any]] = {}
    for profile in args.profile:
        for instance in record(profile, args.orders, args.seed, args.hours):
            kept.setdefault(_course(instance), {"recordedBy": args.ref, **instance})
    args.out.write_text(json.dumps(list(kept.values()), separators=(",", ":")))
    print(f"{len(kept)} histories recorded by {args.ref} in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
