"""Red team (observability): what the app logs, checked against what happened, under fault profiles.

Each profile runs through the local runner (the unmodified app, the Cosmos DB protocol server, the Durable SDK's
replay) with a handler on the root logger that keeps every record the app writes. What happened comes from the
runner's side, never from the app's claims: every state write Cosmos DB accepted (``Audit.transitions``, from
the answers of the audited store, a claimed create counted as its two moves) and every alert on
``operator-alerts``. The checks:

- every write of a state record is one ``StateTransition`` event with its order, attempt and from/to states,
  and no event claims a write that was not made (a write whose answer was lost, found landed later, included);
- every retry, escalation or wait the supervisor wrote is its event (``SupervisorRecovered``...);
- every alert that reached ``operator-alerts`` was logged (``OperatorAlert``, at ERROR);
- every event about an orchestration instance names its order (``orderId``, what the dashboards query by);
- orchestrator code logs nothing (the replay engine runs it again on every episode: each line would repeat);
- no record carries an order's payload (what a customer sent: where to ship, who they are) or a secret."""

from __future__ import annotations

import copy
import gc
import logging
import sys
import traceback
import weakref
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.ids import instance_order_id
from localrun.profile import Profile
from localrun.simulation import SimulationConfig, SimulationResult, run_simulation

pytestmark = pytest.mark.e2e
PROFILES_DIR = Path(__file__).resolve().parents[2] / "examples" / "profiles"
# profile -> (orders, seed): small runs, each with the faults it is named for
PROFILES = {
    "all-faults": (40, 1),
    "lock-expiry": (40, 11),
    "operator-actions": (40, 11),
    "cosmos-lost-responses": (40, 11),
    "durable-latency": (40, 11),
    "stale-reads": (40, 11),
    "lost-restarts-locks": (40, 11),
    "operator-cancels": (40, 11),
    "late-activity-runs": (40, 11),
    "host-restarts": (40, 11),
    "cosmos-outage": (40, 11),
    "prepaid-notifications": (40, 11),
    "concurrent-notifications": (40, 11),
}
# The Durable SDK's code that runs an orchestrator function (each episode replays it from the start).
ORCHESTRATOR_FRAMES = ("durable_functions/models/TaskOrchestrationExecutor.py",)
# What a record must never hold: an order's payload (the runner's orders ship to "<n> Simulation Street" for
# customers "cust-<n>") or a key (the Cosmos DB emulator's well-known key, a Service Bus or storage key).
FORBIDDEN = ("Simulation Street", "cust-", "unitPriceCents", "AccountKey=", "SharedAccessKey=", "C2y6yDjf5")


class Kept(logging.Handler):
    """Every record, with whether an orchestrator function was running when it was written.

    What is kept is a copy reduced to text: its message formatted, its exception and any exception among
    its fields written out. ``observed`` caches each profile's records for the whole session, and a
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


def _as_text(record: logging.LogRecord) -> logging.LogRecord:
    kept = copy.copy(record)  # the other handlers see the record unchanged
    kept.msg, kept.args = record.getMessage(), None
    if record.exc_info:
        kept.exc_text = record.exc_text or "".join(traceback.format_exception(*record.exc_info))
        kept.exc_info = None
    for name, value in _fields(record).items():
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
def observed(profile: str) -> Observed:
    orders, seed = PROFILES[profile]
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


def _written(o: Observed) -> Counter[tuple[str, str, str, str]]:
    return Counter(
        (t.order_id, t.before.value if t.before else "(new)", t.after.value, t.event)
        for t in o.result.audit.transitions
    )


def _logged(o: Observed, name: str = "StateTransition") -> Counter[tuple[str, str, str, str]]:
    return Counter(
        (r.orderId, r.fromState, r.toState, r.transition)  # type: ignore[attr-defined]
        for r in o.events(name)
    )


@pytest.mark.parametrize("profile", PROFILES)
def test_every_state_write_is_one_transition_event(profile: str) -> None:
    """A write whose answer was lost and that nothing read back since is seen as ``StateWriteUnconfirmed``,
    with the move it would make (it may not have landed); every other is its ``StateTransition``."""
    o = observed(profile)
    written, logged = _written(o), _logged(o)
    assert written, "the run wrote nothing"
    unlogged = sorted((written - logged - _logged(o, "StateWriteUnconfirmed")).elements())
    claimed = sorted((logged - written).elements())
    assert not unlogged, f"{len(unlogged)} writes Cosmos DB accepted with no StateTransition event: {unlogged[:10]}"
    assert not claimed, f"{len(claimed)} StateTransition events of writes Cosmos DB never accepted: {claimed[:10]}"


@pytest.mark.parametrize("profile", PROFILES)
def test_each_transition_event_names_the_order_attempt_and_states(profile: str) -> None:
    for r in observed(profile).events("StateTransition", "StateWriteUnconfirmed"):
        fields = {k: getattr(r, k, None) for k in ("orderId", "attempt", "fromState", "toState", "transition")}
        assert all(v is not None for v in fields.values()), fields
        assert isinstance(fields["attempt"], int), fields
        assert r.levelno == (logging.INFO if r.event == "StateTransition" else logging.WARNING), fields  # type: ignore[attr-defined]


# The supervisor's moves of an expired attempt (history event of its write) and the event each is logged as.
SUPERVISOR_MOVES = {
    "RetryScheduled": "SupervisorRecovered",
    "Escalated": "SupervisorEscalated",
    "OutageWait": "SupervisorOutageWait",
    "PaymentWait": "SupervisorPaymentWait",
}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_supervisor_retry_and_escalation_is_its_event(profile: str) -> None:
    o = observed(profile)
    moved = Counter(
        (t.order_id, SUPERVISOR_MOVES[t.event])
        for t in o.result.audit.transitions
        if t.by == "supervisor" and t.event in SUPERVISOR_MOVES
    )
    logged = Counter((r.orderId, r.event) for r in o.events(*SUPERVISOR_MOVES.values()))  # type: ignore[attr-defined]
    assert moved == logged, f"written, not logged: {moved - logged}; logged, not written: {logged - moved}"
    assert all(r.levelno >= logging.WARNING for r in o.events("SupervisorEscalated"))


@pytest.mark.parametrize("profile", PROFILES)
def test_every_alert_sent_was_logged_as_an_error(profile: str) -> None:
    o = observed(profile)
    sent = {m.message_id for m in o.result.broker.contents(OPERATOR_ALERTS_QUEUE)}
    logged = o.events("OperatorAlert")
    assert all(r.levelno == logging.ERROR for r in logged)
    unlogged = sent - {r.alertId for r in logged}  # type: ignore[attr-defined]
    assert not unlogged, f"alerts on {OPERATOR_ALERTS_QUEUE} never logged: {sorted(unlogged)[:10]}"


@pytest.mark.parametrize("profile", PROFILES)
def test_events_about_an_instance_name_its_order(profile: str) -> None:
    unnamed: Counter[str] = Counter()
    for r in observed(profile).records:
        instance = getattr(r, "instanceId", None)
        order = instance_order_id(instance) if isinstance(instance, str) else None
        if order is not None and getattr(r, "orderId", None) != order:
            unnamed[str(getattr(r, "event", None))] += 1
    assert not unnamed, f"events of an instance without its orderId: {dict(unnamed)}"


@pytest.mark.parametrize("profile", PROFILES)
def test_orchestrator_code_logs_nothing_a_replay_would_repeat(profile: str) -> None:
    lines = Counter(f"{r.name}: {r.msg}" for r in observed(profile).in_orchestrator)
    assert not lines, f"logged by orchestrator code (once per replay): {lines.most_common(5)}"


@pytest.mark.parametrize("profile", PROFILES)
def test_no_record_carries_an_order_payload_or_a_secret(profile: str) -> None:
    found: list[str] = []
    for r in observed(profile).records:
        text = f"{r.getMessage()} {_fields(r)}"
        found += [f"{r.name} {getattr(r, 'event', '')}: {word}" for word in FORBIDDEN if word in text]
    assert not found, found[:10]


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


def test_a_kept_record_keeps_no_frame_of_its_exception_alive() -> None:
    """What a cached record holds lives to interpreter exit: it must not be an invocation's arguments."""

    class Message:  # stands for the decoded uamqp message an invocation's frame holds
        pass

    kept = Kept()
    logger = logging.getLogger("tests.observability.kept")
    logger.addHandler(kept)
    logger.propagate = False  # pytest's own handlers keep the test's records until its report

    def invocation(message: Message) -> None:
        try:
            raise RuntimeError("refused")
        except RuntimeError as exc:
            logger.error("failed: %s", exc, exc_info=True, extra={"error": exc})

    message = Message()
    alive = weakref.ref(message)
    try:
        invocation(message)
    finally:
        logger.removeHandler(kept)
        logger.propagate = True
    del message
    gc.collect()
    assert alive() is None, "a kept record holds the failed invocation's frame"
    [record] = kept.records
    assert record.getMessage() == "failed: refused" and "RuntimeError: refused" in (record.exc_text or "")
