"""Simulations whose every log record is kept, made once per pytest run and shared.

``tests/e2e/test_fault_profiles.py`` checks what a profile's run did (its report) and
``tests/observability/test_events_match_the_record.py`` what the app logged in it: for the profiles of ``KEPT``
both read the same run, with the same orders and seed, instead of simulating the profile twice (both run in
``dev.py test``'s e2e run, docs/testing.md). A run is kept for the session (``kept_run``, ``@cache``)."""

from __future__ import annotations

import copy
import logging
import sys
import traceback
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from localrun.profile import Profile
from localrun.simulation import SimulationConfig, SimulationResult, run_simulation

PROFILES_DIR = Path(__file__).resolve().parents[1] / "examples" / "profiles"
# profile -> (orders, seed): the runs of tests/e2e/test_fault_profiles.py whose records are kept, each with the
# faults it is named for (all-faults at seed 1, which compensates at 100 orders)
KEPT = {
    "all-faults": (100, 1),
    **dict.fromkeys(
        (
            "lock-expiry",
            "operator-actions",
            "cosmos-lost-responses",
            "durable-latency",
            "stale-reads",
            "lost-restarts-locks",
            "operator-cancels",
            "late-activity-runs",
            "host-restarts",
            "cosmos-outage",
            "prepaid-notifications",
            "concurrent-notifications",
        ),
        (100, 11),
    ),
}
# The Durable SDK's code that runs an orchestrator function (each episode replays it from the start).
ORCHESTRATOR_FRAMES = ("durable_functions/models/TaskOrchestrationExecutor.py",)


class Kept(logging.Handler):
    """Every record, with whether an orchestrator function was running when it was written.

    What is kept is a copy reduced to text: its message formatted, its exception and any exception among
    its fields written out. ``kept_run`` caches each profile's records for the whole session, and a
    record's exception holds its traceback, whose frames hold the invocation's arguments: the decoded
    ``uamqp`` messages of the Service Bus triggers, still alive at interpreter exit, where their
    ``__dealloc__`` logs through a module already torn down ("Error in sys.excepthook", docs/testing.md)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.in_orchestrator: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record = _as_text(record)
        self.records.append(record)
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename.endswith(ORCHESTRATOR_FRAMES):
                self.in_orchestrator.append(record)
                break
            frame = frame.f_back  # type: ignore[assignment]


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """A record's own fields (its ``extra``), without the standard ones."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


def _as_text(record: logging.LogRecord) -> logging.LogRecord:
    kept = copy.copy(record)  # the other handlers see the record unchanged
    kept.msg, kept.args = record.getMessage(), None
    if record.exc_info:
        kept.exc_text = record.exc_text or "".join(traceback.format_exception(*record.exc_info))
        kept.exc_info = None
    for name, value in fields(record).items():
        if isinstance(value, BaseException):
            setattr(kept, name, repr(value))
    return kept


@dataclass
class Observed:
    result: SimulationResult
    records: list[logging.LogRecord]
    in_orchestrator: list[logging.LogRecord]

    def events(self, *names: str) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "event", None) in names]


@cache
def kept_run(profile: str) -> Observed:
    """``profile``'s run of ``KEPT``, every record the app wrote at INFO and above kept (the Functions worker's
    level); made at the first call of the pytest run."""
    orders, seed = KEPT[profile]
    kept = Kept()
    root = logging.getLogger()
    level = root.level
    root.addHandler(kept)
    root.setLevel(logging.INFO)  # as the Functions worker sets it
    try:
        result = run_simulation(
            SimulationConfig(orders=orders, seed=seed, profile=Profile.load(PROFILES_DIR / f"{profile}.json"))
        )
    finally:
        root.removeHandler(kept)
        root.setLevel(level)
    return Observed(result, kept.records, kept.in_orchestrator)
