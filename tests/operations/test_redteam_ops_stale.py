"""The ops API under Cosmos DB Session consistency: an operator's request is served by any instance, whose client
has no session token for the writes another instance (or an earlier request) made, so its reads may come from a
replica one write behind (the runner's model, ``localrun/stale_reads.py``, here at rate 1: every read within the
lag of another client's write is the version before it). A conditional write catches a stale read; an answer
given on a read alone does not."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, NamedTuple

import pytest

from adapters.cosmos.state_store import CosmosStateStore
from contracts.names import STATE_CONTAINER
from domain.review import REVIEW_ANSWERED, noted_answer, pending_review
from localrun.audit import Audit, AuditedStateStore, CosmosFaults
from localrun.profile import Profile
from localrun.stale_reads import StaleReads
from operations import instances
from orchestrators.names import SCHEDULER
from tests.operations.harness import OPERATOR, OpsHarness, first_review

pytestmark = pytest.mark.cosmos

LAG = timedelta(seconds=2)
ANSWER = {"reviewId": first_review("o-gone"), "action": "fail", "reason": "too risky"}


class Client:
    """One instance's Cosmos client (hashable and weakly referenced, as the runner's are)."""


class Instances:
    """Which instance of the app serves what comes next (``serving``: its name): each its own Cosmos client,
    its own session."""

    def __init__(self) -> None:
        self.serving = "setup"
        self._clients: dict[str, Client] = {}

    def __call__(self) -> object:
        return self._clients.setdefault(self.serving, Client())


class Stale(NamedTuple):
    ops: OpsHarness  # its states: served as from a replica behind, within the lag of another client's write
    serving: Instances
    injected: Counter[str]  # cosmos_stale_reads: how many reads were served stale
    latest: CosmosStateStore  # the record as it is (the write region's)


@pytest.fixture
def stale(cosmos_db: Any) -> Iterator[Stale]:
    ops = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    audit, injected, serving = Audit(), Counter[str](), Instances()
    reads = StaleReads(1.0, LAG, random.Random(1), ops.clock.now, serving, injected)
    faults = CosmosFaults(Profile(), random.Random(1), audit)
    raw = CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER))
    ops.change_context(states=AuditedStateStore(raw, ops.clock, faults, audit, reads))
    yield Stale(ops, serving, injected, raw)
    ops.close()


def _attempt(takes_events: bool) -> Any:
    async def state(client: Any, instance: str) -> instances.AttemptState:
        return instances.AttemptState(takes_events=takes_events, name=SCHEDULER)

    return state


def test_an_answer_taken_back_and_posted_again_on_a_replica_behind_the_take_back_is_not_left_to_the_supervisor(
    stale: Stale, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING. The paused attempt is gone (``raise_event`` 404): the first answer's note is taken back and the
    operator hears 409. Posted again at once (the console's button, another tab), another instance reads the
    record from a replica without the take-back: the note looks like it stands, the attempt is gone, so
    ``left_to_supervisor`` answered 200 ``carriedOutBy: supervisor``, on that read alone. Nothing stands: the
    supervisor retries the order as a plain expired attempt, the operator's ``fail`` is never carried out. Now
    that 200 is given only once a conditional write of the version read lands (it is the latest)."""
    ops, serving, injected, latest = stale
    assert ops.ctx is not None
    ops.awaiting_review("o-gone")  # written only: the attempt does not exist, raise_event answers 404
    ops.clock.advance_to(ops.clock.now() + LAG * 2)
    monkeypatch.setattr(instances, "attempt_state", _attempt(True))  # it looked running, then the raise: 404
    serving.serving = "instance-a"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert status == 409 and "taken back" in body["error"], body

    monkeypatch.setattr(instances, "attempt_state", _attempt(False))
    serving.serving = "instance-b"  # posted again at once, served by another instance
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert injected["cosmos_stale_reads"] >= 1
    assert status == 409 and "carriedOutBy" not in body, body  # was 200, carriedOutBy: supervisor
    record = latest.get("o-gone")
    assert record is not None and pending_review(record) is not None  # the note was taken back: nothing stands
    assert noted_answer(record) is None

    ops.clock.advance_to(ops.clock.now() + LAG * 2)  # the replicas caught up
    serving.serving = "instance-c"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert status == 409 and "not running" in body["error"], body


def test_an_answer_that_stands_posted_again_on_a_replica_without_its_note_is_not_told_it_cannot_be_taken(
    stale: Stale, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING. The answer was noted and its raise failed ambiguously (503 ``noted: true``: "post the same answer
    again"); the attempt is gone by the time it is posted again, on another instance, whose replica has not got
    the note: the review looks unanswered and the attempt gone, so it answered 409 "it cannot take the answer",
    though the note stands and the supervisor carries it out. Now the refusal, too, waits for a conditional write
    of the version read: the operator hears "changed while you acted", and once the replicas caught up, 200."""
    ops, serving, _injected, latest = stale
    assert ops.ctx is not None
    ops.awaiting_review("o-gone")
    ops.clock.advance_to(ops.clock.now() + LAG * 2)
    monkeypatch.setattr(instances, "attempt_state", _attempt(True))

    async def ambiguous(client: Any, instance: str, failure: Exception) -> bool:
        return False

    monkeypatch.setattr(instances, "gone_after_failed_raise", ambiguous)
    serving.serving = "instance-a"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert status == 503 and body["noted"] is True, body

    monkeypatch.setattr(instances, "attempt_state", _attempt(False))
    serving.serving = "instance-b"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert status == 409 and "cannot take the answer" not in body["error"], body  # it can: the note stands
    assert "reload" in body["error"], body
    record = latest.get("o-gone")
    assert record is not None and record.history[-1].event == REVIEW_ANSWERED  # the note still stands

    ops.clock.advance_to(ops.clock.now() + LAG * 2)
    serving.serving = "instance-c"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert status == 200 and body["carriedOutBy"] == "supervisor", body
