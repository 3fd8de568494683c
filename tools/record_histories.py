"""Record the Durable histories and the Cosmos DB documents a release's code makes, for the upgrade tests of later
releases (``tests/orchestrators/test_recorded_histories_replay.py``, docs/design.md "Versions";
``tests/adapters/test_recorded_documents.py`` with ``--documents``).

Run it with the code of the release to record, from a worktree of that release (this file is not in older
releases: give its path), with the venv of the repository::

    git worktree add --detach /tmp/rel <ref> && cd /tmp/rel
    /path/to/.venv/bin/python /path/to/tools/record_histories.py OUT.json --ref <ref> \\
        --profile examples/profiles/all-faults.json [--profile ...] [--orders 80] [--seed 5] [--hours 0.05] \\
        [--documents DOCS.json]

Each profile is one local-runner simulation (``localrun.simulation.run_simulation``) cut at its horizon; every
orchestration instance the emulated extension holds then, finished or not, is recorded with its input and its
history (the extension's events, as the context JSON carries them). One instance per distinct course (its
orchestrator, the activities, timers and events it went through, and how it ended) is kept. A finished
history holds every episode: the replay test replays each episode's prefix, which is what the extension hands
the code deployed over an instance caught there. ``--documents``: the documents of the ``state`` and ``orders``
containers at each horizon too, one per shape (its keys, nested ones included, and their value types) and id."""

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


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return sorted((k, _shape(v)) for k, v in value.items() if not k.startswith("_") and k not in ("id", "orderId"))
    if isinstance(value, list):
        return sorted({json.dumps(_shape(v)) for v in value})
    return type(value).__name__


def record(
    profile: str, orders: int, seed: int, hours: float, documents: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    import localrun.simulation as sim
    from localrun.host import LocalHost
    from localrun.profile import Profile

    found: list[dict[str, Any]] = []
    close = LocalHost.close
    ensure_database = vars(sim)["ensure_database"]  # the database the run makes
    databases: list[Any] = []

    def recording_ensure_database(*args: Any, **kwargs: Any) -> Any:
        databases.append(ensure_database(*args, **kwargs))
        return databases[-1]

    def recording_close(host: Any) -> None:
        for container in ("state", "orders") if documents is not None else ():
            for item in databases[-1].get_container_client(container).read_all_items():
                document = {k: v for k, v in item.items() if not k.startswith("_")}
                documents.append({"container": container, "document": document})  # type: ignore[union-attr]
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
    vars(sim)["ensure_database"] = recording_ensure_database
    try:
        config = sim.SimulationConfig(
            orders=orders, seed=seed, profile=Profile.load(profile), horizon=datetime.timedelta(hours=hours)
        )
        sim.run_simulation(config)
    finally:
        LocalHost.close = close  # type: ignore[method-assign]
        vars(sim)["ensure_database"] = ensure_database
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ref", required=True, help="the commit recorded (kept with each history)")
    parser.add_argument("--profile", action="append", required=True)
    parser.add_argument("--orders", type=int, default=80)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--hours", type=float, default=0.05)
    parser.add_argument("--documents", type=Path, help="record the containers' documents here too")
    args = parser.parse_args()
    kept: dict[str, dict[str, Any]] = {}
    documents: list[dict[str, Any]] = []
    for profile in args.profile:
        for instance in record(profile, args.orders, args.seed, args.hours, documents):
            kept.setdefault(_course(instance), {"recordedBy": args.ref, **instance})
    if args.documents is not None:
        shapes: dict[str, dict[str, Any]] = {}
        ids: set[tuple[str, str]] = set()
        for entry in documents:
            shape = json.dumps([entry["container"], _shape(entry["document"])])
            key = (entry["container"], entry["document"]["id"])
            if shape not in shapes and key not in ids:
                ids.add(key)
                shapes[shape] = {"recordedBy": args.ref, **entry}
        args.documents.write_text(json.dumps(list(shapes.values()), separators=(",", ":")))
        print(f"{len(shapes)} documents recorded by {args.ref} in {args.documents}", file=sys.stderr)
    args.out.write_text(json.dumps(list(kept.values()), separators=(",", ":")))
    print(f"{len(kept)} histories recorded by {args.ref} in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
