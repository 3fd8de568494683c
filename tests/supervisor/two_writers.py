"""The harness of ``test_redteam_two_writers.py``: every writer of a state record, as the app's own code runs it,
the record states both writers of a pair may act in, and a store that lets one writer read, then runs the other
writer's whole write, then lets the first one finish (its version is stale: it must read again and decide again,
or give up cleanly).

Every run of a case starts from the same moment on the same clock and builds its record with the app's own code,
under an order id of its own; records are compared as documents with that id taken out, so the interleaved run can
be held to the serial runs of the same pair (A then B, B then A, B alone)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from activities.compensation_steps import (
    await_review,
    begin_undo,
    close_review,
    fail_compensation,
    finish_compensation,
    hold_undo,
    record_undo,
    release_undo,
    request_compensation,
)
from activities.scheduler_steps import (
    begin_step,
    fail_order,
    mark_processed,
    publish_status,
    release_for_retry,
    settle_retired_attempt,
)
from adapters.clock import ManualClock
from adapters.cosmos.deferral_store import CosmosDeferralLog
from adapters.cosmos.health_store import CosmosHealthStore
from adapters.cosmos.mapping import to_document
from adapters.cosmos.ops_queries import CosmosOpsQueries
from adapters.cosmos.order_store import CosmosOrderStore
from adapters.cosmos.state_store import CosmosStateStore, Page, SeekKey, StrayPage, update_once
from adapters.servicebus.sender import OutgoingMessage, QueueNotFound
from contracts.activities import (
    AwaitReviewInput,
    BeginStepInput,
    BeginUndoInput,
    CloseReviewInput,
    FailCompensationInput,
    FailOrderInput,
    FinishCompensationInput,
    HoldUndoInput,
    MarkProcessedInput,
    PublishStatusInput,
    RecordUndoInput,
    ReleaseForRetryInput,
    ReleaseUndoInput,
    RequestCompensationInput,
    SettleRetiredInput,
    StepResult,
)
from contracts.messages import CancelOrder, PaymentNotification, StatusName
from contracts.names import ORDERS_CONTAINER, STATE_CONTAINER
from deferral.payment import apply_notification
from dependencies import AppContext
from domain import review, transitions
from domain.compensation import claim_compensation, compensation_instance_id, undo_request_id
from domain.ids import is_compensation_instance
from domain.records import RECEIVED_OWED, StateRecord
from domain.states import ProcessState
from notifications.received import owe_received, say_before_status
from operations import actions
from orchestrators.agent_call import agent_request
from orchestrators.names import COMPENSATION, SCHEDULER
from orchestrators.starter import release_untried, try_claim
from settings import Settings
from submission.cancellation import cancel_order
from submission.intake import _owe_received
from supervisor.backend_wait import ABSENT
from supervisor.compensation_rounds import claim_due_compensations
from supervisor.operator import compensate_action, resubmit_action
from supervisor.owed import deliver_owed, owes_notifications
from supervisor.recovery import recover
from tests.fakes import FakeReceivedMessage, QueuesWithNothingDeferred, RecordingSender
from tests.orchestrators.support import sample_order

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
CLIENT = "client-statuses"
STEP = timedelta(seconds=60)
REVIEW_WAIT = timedelta(hours=1)
RESERVED = {"reservationId": "res-1"}
CAPTURED = {"captureId": "cap-1", "amountCents": 1000}
SETTINGS = {"MAX_IN_FLIGHT": "1000000", "MAX_FAILURES": "3"}

# --- the audit: every version any writer read or wrote, and every replace ------------------------------------


@dataclass
class Write:
    writer: str
    base: StateRecord | None  # the version it replaced (None: a version no wrapped store saw)
    new: StateRecord


@dataclass
class Audit:
    versions: dict[str, StateRecord] = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)

    def saw(self, record: StateRecord | None) -> StateRecord | None:
        if record is not None and record.version is not None:
            self.versions[record.version] = record
        return record


class AuditedStore:
    """A writer's own store (its own process cache), reporting what it reads and writes to the run's ``Audit``.
    ``after_read``: called after each read of ``order_id`` returns (get, recent, a query holding it) and after
    each write of it lands; ``reads`` counts both (the points where another writer can come in between)."""

    def __init__(self, inner: CosmosStateStore, audit: Audit, writer: str, order_id: str) -> None:
        self._inner = inner
        self._audit = audit
        self._writer = writer
        self._order_id = order_id
        self.after_read: Callable[[], None] = lambda: None
        self.reads = 0

    def _read(self, found: bool) -> None:
        if found:
            self.reads += 1
            self.after_read()

    def get(self, order_id: str) -> StateRecord | None:
        record = self._audit.saw(self._inner.get(order_id))
        self._read(order_id == self._order_id and record is not None)
        return record

    def recent(self, order_id: str) -> StateRecord | None:
        record = self._audit.saw(self._inner.recent(order_id))
        self._read(order_id == self._order_id and record is not None)
        return record

    def create(self, record: StateRecord) -> StateRecord:
        written = self._inner.create(record)
        self._audit.writes.append(Write(self._writer, None, written))
        return self._audit.saw(written) or written

    def replace(self, record: StateRecord) -> StateRecord:
        base = self._audit.versions.get(record.version or "")
        written = self._inner.replace(record)
        self._audit.writes.append(Write(self._writer, base, written))
        self._audit.saw(written)
        self._read(True)
        return written

    def claimable(self, now: datetime, limit: int) -> list[StateRecord]:
        record = self.get(self._order_id)
        return [record] if record is not None and transitions.is_claimable(record, now) else []

    def expired_page(
        self,
        state: ProcessState,
        now: datetime,
        not_before: datetime | None,
        page_size: int,
        after: SeekKey | None,
        grace: timedelta = transitions.NO_GRACE,
    ) -> Page:
        """The query's page, of this case's order only (the database holds every case's records)."""
        record = self.get(self._order_id)
        due = record is not None and record.process_state is state and transitions.past_due(record, now, grace)
        return Page([record] if due and record is not None else [], None, 0.0)

    def undated_page(self, state: ProcessState, page_size: int) -> Page:
        """The query's page, of this case's order only: its record if of ``state`` and without a ``completeBy``."""
        record = self.get(self._order_id)
        undated = record is not None and record.process_state is state and record.complete_by is None
        return Page([record] if undated and record is not None else [], None, 0.0)

    def stray_page(self, beyond: datetime, limit: int, after: str | None = None) -> StrayPage:
        return StrayPage([], [], False, 0.0)  # a pair of writers writes no stray document

    def count(self, state: ProcessState) -> int:
        return 0  # the caps are not what a pair of writers tests

    def forget_recent(self) -> None:
        self._inner.forget_recent()


class WritersSender:
    """The run's sender, noting which writer sent what; ``refused`` queues refuse the app (``QueueNotFound``)."""

    def __init__(self, run: Run, writer: str, refused: frozenset[str] = frozenset()) -> None:
        self._run = run
        self._writer = writer
        self._refused = refused

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue in self._refused:
            raise QueueNotFound(f"queue {queue!r} not found")
        self._run.sender.send(queue, message)
        self._run.sent.append((self._writer, queue, message.message_id.replace(self._run.order_id, "ORDER")))

    def refusing(self, queue: str) -> WritersSender:
        return WritersSender(self._run, self._writer, self._refused | {queue})


# --- contexts -------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run of a case: its clock, its audit, its order id, and what was sent."""

    cosmos_db: Any
    clock: ManualClock
    order_id: str
    audit: Audit = field(default_factory=Audit)
    sender: RecordingSender = field(default_factory=RecordingSender)
    sent: list[tuple[str, str, str]] = field(default_factory=list)  # (writer, queue, MessageId), in order

    def ctx(
        self, writer: str, seed: int = 7, process: CosmosStateStore | None = None
    ) -> tuple[AppContext, AuditedStore]:
        state = self.cosmos_db.get_container_client(STATE_CONTAINER)
        store = AuditedStore(process or CosmosStateStore(state), self.audit, writer, self.order_id)
        ctx = AppContext(
            settings=Settings.from_env({}, **SETTINGS),
            clock=self.clock,
            states=store,
            orders=CosmosOrderStore(self.cosmos_db.get_container_client(ORDERS_CONTAINER)),
            sender=WritersSender(self, writer),
            remote={},
            deferred=QueuesWithNothingDeferred(),
            deferrals=CosmosDeferralLog(state),
            ops=CosmosOpsQueries(state),
            health=CosmosHealthStore(state),
            rng=random.Random(seed),
        )
        return ctx, store


# --- the record states ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scene:
    """What the writers of a record state need: the instance holding it, that instance's next write number,
    the review it waits for, the compensation entry of its undo in flight."""

    owner: str | None = None
    next_write: int = 1
    review_id: str | None = None
    seq: int | None = None
    undo: tuple[str, str, str] | None = None  # the undo to begin: its step, agent, action
    status: tuple[StatusName, int] | None = None  # the failure status the record owes, and its attempt


def _begin(ctx: AppContext, order_id: str, owner: str, step: str, agent: str, number: int, **kw: Any) -> Any:
    request = agent_request(
        request_id=f"{owner}:{step}:{agent}",
        instance_id=owner,
        order_id=order_id,
        step=step,
        action="do",
        attempt=_attempt(owner),
        deadline=ctx.clock.now() + STEP,
        idempotency_key=f"{order_id}:{step}",
        payload={"orderId": order_id},
    )
    return begin_step(ctx, BeginStepInput(request=request, agent=agent, write_number=number, **kw))


def _attempt(owner: str) -> int:
    return int(owner.rsplit(":", 1)[1])


def _pending(ctx: AppContext, order_id: str, failures: int = 0) -> StateRecord:
    record = transitions.new_record(order_id, CLIENT, ctx.clock.now())
    if failures:
        record = replace(record, failure_count=failures, attempt=failures)
    ctx.states.create(record)
    found = ctx.states.get(order_id)
    assert found is not None
    return found


def _forward(ctx: AppContext, order_id: str, failures: int = 0) -> Scene:
    """Claimed, reserve-inventory begun (write 1), its deadline a step ahead."""
    record = _pending(ctx, order_id, failures)
    claimed = update_once(ctx.states, record, lambda r: transitions.claim(r, ctx.clock.now(), ctx.settings.start_grace))
    owner = str(claimed.locked_by)
    _begin(ctx, order_id, owner, "reserve-inventory", "inventory", 1, announce=True)
    return Scene(owner, 2)


def _charging(ctx: AppContext, order_id: str) -> Scene:
    """reserve-inventory done, charge-payment begun (write 2)."""
    scene = _forward(ctx, order_id)
    owner = str(scene.owner)
    _advance(ctx, timedelta(seconds=5))
    _begin(
        ctx,
        order_id,
        owner,
        "charge-payment",
        "payment",
        2,
        completes=StepResult(step="reserve-inventory", result=RESERVED),
        queue="payment-requests",
    )
    return Scene(owner, 3)


def _mark(ctx: AppContext, order_id: str) -> None:
    record = ctx.states.get(order_id)
    assert record is not None
    update_once(ctx.states, record, lambda r: owe_received(r, ctx.clock.now()))


def _review(ctx: AppContext, order_id: str) -> Scene:
    scene = _charging(ctx, order_id)
    owner = str(scene.owner)
    review_id = f"{owner}:charge-payment:review:1"
    await_review(
        ctx,
        AwaitReviewInput(
            order_id=order_id,
            instance_id=owner,
            step="charge-payment",
            attempt=_attempt(owner),
            review_id=review_id,
            until=ctx.clock.now() + REVIEW_WAIT,
            error="card declined",
            reason="high impact",
            default_action="compensate",
            amount_cents=250_000,
            write_number=3,
        ),
    )
    return Scene(owner, 4, review_id)


def _past_review(ctx: AppContext) -> None:
    _advance(ctx, REVIEW_WAIT + ctx.settings.start_grace + timedelta(seconds=1))


def _noted(ctx: AppContext, order_id: str, scene: Scene) -> None:
    record = ctx.states.get(order_id)
    assert record is not None
    now = ctx.clock.now()
    update_once(
        ctx.states,
        record,
        lambda r: review.note_review_answer(r, str(scene.review_id), "op-earlier", "compensate", "checked", now),
    )


def _compensating(ctx: AppContext, order_id: str) -> Scene:
    """charge-payment refused for good: compensation requested (unowned, due now), the reservation to undo."""
    scene = _charging(ctx, order_id)
    owner = str(scene.owner)
    request_compensation(
        ctx,
        RequestCompensationInput(
            order_id=order_id,
            instance_id=owner,
            step="charge-payment",
            attempt=_attempt(owner),
            error="card declined",
            reason="compensating",
            write_number=3,
        ),
    )
    return Scene()


def _claimed_round(ctx: AppContext, order_id: str) -> Scene:
    """Round 1 claimed, nothing of it written yet (its undo's begin is its write 1)."""
    _compensating(ctx, order_id)
    record = ctx.states.get(order_id)
    assert record is not None
    now = ctx.clock.now()
    claimed = update_once(
        ctx.states,
        record,
        lambda r: claim_compensation(r, now, ctx.settings.start_grace, ctx.settings.max_failures, "supervisor"),
    )
    entry = claimed.compensation[0]
    undo = (entry.step, entry.agent, entry.undo_action)
    return Scene(compensation_instance_id(order_id, claimed.attempt), 1, seq=entry.seq, undo=undo)


def _begin_undo(ctx: AppContext, order_id: str, scene: Scene) -> Any:
    owner = _owner(scene)
    step, agent, action = scene.undo or ("", "", "")
    request = agent_request(
        request_id=undo_request_id(owner, step, agent, (scene.next_write + 1) // 2),  # write 1: try 1, write 3: try 2
        instance_id=owner,
        order_id=order_id,
        step=step,
        action=action,
        attempt=_attempt(owner),
        deadline=ctx.clock.now() + STEP,
        idempotency_key=f"{order_id}:{step}:undo",
        payload={"orderId": order_id},
    )
    data = BeginUndoInput(request=request, agent=agent, seq=int(scene.seq or 0), write_number=scene.next_write)
    return begin_undo(ctx, data)


def _round(ctx: AppContext, order_id: str) -> Scene:
    """Round 1 claimed, the reservation's undo begun (write 1)."""
    scene = _claimed_round(ctx, order_id)
    _begin_undo(ctx, order_id, scene)
    return replace(scene, next_write=2)


def _advance(ctx: AppContext, delta: timedelta) -> None:
    clock = ctx.clock
    assert isinstance(clock, ManualClock)
    clock.advance(delta)


def build_pending(ctx: AppContext, order_id: str) -> Scene:
    _pending(ctx, order_id)
    return Scene()


def build_pending_owed(ctx: AppContext, order_id: str) -> Scene:
    _pending(ctx, order_id)
    _mark(ctx, order_id)
    return Scene()


def build_pending_retry(ctx: AppContext, order_id: str) -> Scene:
    """A supervisor retry's Pending, its backoff passed."""
    _forward(ctx, order_id)
    _advance(ctx, STEP + timedelta(seconds=1))
    record = ctx.states.get(order_id)
    assert record is not None
    recover(ctx, record)
    _advance(ctx, timedelta(minutes=10))
    return Scene()


def build_running(ctx: AppContext, order_id: str) -> Scene:
    return _forward(ctx, order_id)


def build_running_owed(ctx: AppContext, order_id: str) -> Scene:
    scene = _forward(ctx, order_id)
    _mark(ctx, order_id)
    return scene


def build_expired(ctx: AppContext, order_id: str) -> Scene:
    scene = _forward(ctx, order_id)
    _advance(ctx, STEP + timedelta(seconds=1))
    return scene


def build_start_missed(ctx: AppContext, order_id: str) -> Scene:
    """Claimed by the starter, whose start failed: the attempt never began, its start grace passed."""
    record = _pending(ctx, order_id)
    claimed = update_once(ctx.states, record, lambda r: transitions.claim(r, ctx.clock.now(), ctx.settings.start_grace))
    _advance(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    return Scene(str(claimed.locked_by), 1)


def build_claimed(ctx: AppContext, order_id: str) -> Scene:
    """Claimed by the starter, its start never tried (the run's time for starts spent), within its start grace."""
    record = _pending(ctx, order_id)
    claimed = update_once(ctx.states, record, lambda r: transitions.claim(r, ctx.clock.now(), ctx.settings.start_grace))
    return Scene(str(claimed.locked_by), 1)


def build_expired_last(ctx: AppContext, order_id: str) -> Scene:
    """The attempt whose failure is the last one MAX_FAILURES allows, expired."""
    scene = _forward(ctx, order_id, failures=2)
    _advance(ctx, STEP + timedelta(seconds=1))
    return scene


def build_charging(ctx: AppContext, order_id: str) -> Scene:
    """A prepaid order's payment step in flight, its notification not applied yet."""
    return _charging(ctx, order_id)


def build_charging_expired(ctx: AppContext, order_id: str) -> Scene:
    scene = _charging(ctx, order_id)
    _advance(ctx, STEP + timedelta(seconds=1))
    return scene


def build_processed_owed(ctx: AppContext, order_id: str) -> Scene:
    """Processed, still owing Received (its activity's send of it failed after the write)."""
    scene = _forward(ctx, order_id)
    processed(ctx, order_id, scene)
    record = ctx.states.get(order_id)
    assert record is not None
    ctx.states.replace(replace(record, received_owed=ctx.clock.now()))
    return Scene()


def build_review(ctx: AppContext, order_id: str) -> Scene:
    return _review(ctx, order_id)


def build_review_noted(ctx: AppContext, order_id: str) -> Scene:
    scene = _review(ctx, order_id)
    _noted(ctx, order_id, scene)
    return scene


def build_review_due(ctx: AppContext, order_id: str) -> Scene:
    scene = _review(ctx, order_id)
    _past_review(ctx)
    return scene


def build_review_noted_due(ctx: AppContext, order_id: str) -> Scene:
    scene = _review(ctx, order_id)
    _noted(ctx, order_id, scene)
    _past_review(ctx)
    return scene


def build_error(ctx: AppContext, order_id: str) -> Scene:
    scene = _forward(ctx, order_id)
    owner = str(scene.owner)
    fail_order(
        ctx,
        FailOrderInput(
            order_id=order_id,
            instance_id=owner,
            step="reserve-inventory",
            attempt=_attempt(owner),
            error="out of stock",
            write_number=2,
        ),
    )
    return Scene(status=("Failed", _attempt(owner)))


def build_compensating(ctx: AppContext, order_id: str) -> Scene:
    return _compensating(ctx, order_id)


def build_round(ctx: AppContext, order_id: str) -> Scene:
    return _round(ctx, order_id)


def build_round_stuck(ctx: AppContext, order_id: str) -> Scene:
    scene = _round(ctx, order_id)
    _advance(ctx, STEP + timedelta(seconds=1))
    return scene


def build_round_undone(ctx: AppContext, order_id: str) -> Scene:
    scene = _round(ctx, order_id)
    record_undo(
        ctx,
        RecordUndoInput(
            order_id=order_id,
            instance_id=str(scene.owner),
            seq=int(scene.seq or 0),
            result={"releaseId": "rel-1"},
            write_number=2,
        ),
    )
    return replace(scene, next_write=3)


def build_compensation_failed(ctx: AppContext, order_id: str) -> Scene:
    scene = _round(ctx, order_id)
    fail_compensation(
        ctx,
        FailCompensationInput(
            order_id=order_id, instance_id=str(scene.owner), seq=int(scene.seq or 0), error="refused", write_number=2
        ),
    )
    return Scene(status=("CompensationFailed", _attempt(_owner(scene))))


def build_round_claimed(ctx: AppContext, order_id: str) -> Scene:
    return _claimed_round(ctx, order_id)


def build_round_start_missed(ctx: AppContext, order_id: str) -> Scene:
    """Round 1 claimed, its start failed: no undo begun, its start grace passed."""
    scene = _claimed_round(ctx, order_id)
    _advance(ctx, ctx.settings.start_grace + timedelta(seconds=1))
    return scene


def build_round_held(ctx: AppContext, order_id: str) -> Scene:
    """The undo failed transiently: the round holds its record through the backoff (write 2), its next try due."""
    scene = _round(ctx, order_id)
    _hold(ctx, order_id, scene)
    _advance(ctx, BACKOFF)
    return replace(scene, next_write=3)


def build_round_held_stuck(ctx: AppContext, order_id: str) -> Scene:
    """The round held its record through a backoff and died in it: past the hold and the supervisor's grace."""
    scene = build_round_held(ctx, order_id)
    _advance(ctx, ctx.settings.start_grace + ctx.settings.supervisor_grace + timedelta(seconds=1))
    return scene


def build_round_released(ctx: AppContext, order_id: str) -> Scene:
    """The undo met an open circuit: the round handed its record to the supervisor (write 2) and ended."""
    scene = _round(ctx, order_id)
    _release_undo(ctx, order_id, scene)
    return replace(scene, next_write=2)  # a late run of that write is its own number again


BACKOFF = timedelta(seconds=30)


def _undo_input[I](kind: Callable[..., I], order_id: str, scene: Scene, **fields: Any) -> I:
    """The input of a round's fenced write about its undo in flight, as the round's next write."""
    return kind(
        order_id=order_id, instance_id=_owner(scene), seq=int(scene.seq or 0), write_number=scene.next_write, **fields
    )


def _hold(ctx: AppContext, order_id: str, scene: Scene) -> Any:
    return hold_undo(ctx, _undo_input(HoldUndoInput, order_id, scene, until=ctx.clock.now() + BACKOFF))


def _release_undo(ctx: AppContext, order_id: str, scene: Scene) -> Any:
    return release_undo(ctx, _undo_input(ReleaseUndoInput, order_id, scene, error="circuit open: not called"))


# --- the writers ----------------------------------------------------------------------------------------------

Act = Callable[[AppContext, str, Scene], str]


def _outcome(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "none"
    data = value.to_json() if hasattr(value, "to_json") else value
    if isinstance(data, dict) and "owned" in data and data.get("owned") is False:
        return "NotOwned"
    return f"{type(value).__name__} {json.dumps(data, sort_keys=True, default=str)}"


# act -> the production writers of the state record it runs (``module.function``, a method as ``Class.method``: the
# function that holds the write's call, or calls a function that only passes a write on). The test
# ``test_two_writers_cover_every_writer`` holds the matrix to every writer in the code, and runs each act once to
# see it reach what it declares.
COVERS: dict[str, frozenset[str]] = {}


def covers(*writers: str) -> Callable[[Act], Act]:
    def declared(act: Act) -> Act:
        COVERS[act.__name__] = frozenset(writers)
        return act

    return declared


def _guard(act: Act) -> Act:
    def run(ctx: AppContext, order_id: str, scene: Scene) -> str:
        try:
            return act(ctx, order_id, scene)
        except Exception as exc:  # an outcome like any other: the serial runs must raise it too
            return f"raised {type(exc).__name__}"

    run.__name__ = act.__name__
    return run


@covers("orchestrators.starter.try_claim")
def starter(ctx: AppContext, order_id: str, scene: Scene) -> str:
    [*found] = ctx.states.claimable(ctx.clock.now(), 1)
    if not found:
        return "nothing claimable"
    return "claimed" if try_claim(ctx, found[0]) is not None else "not claimed"


@covers("supervisor.recovery.recover", "supervisor.recovery._act_on_decision")
def supervisor(ctx: AppContext, order_id: str, scene: Scene) -> str:
    record = ctx.states.get(order_id)
    if record is None or not transitions.is_expired(record, ctx.clock.now()):
        return "nothing expired"
    return str(recover(ctx, record).action)


@covers("supervisor.recovery._start_missed")
def start_missed(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The supervisor, the backend answering 404 for the attempt's instance (``supervisor.backend_wait.ABSENT``)."""
    record = ctx.states.get(order_id)
    if record is None or not transitions.is_expired(record, ctx.clock.now()):
        return "nothing expired"
    return str(recover(ctx, record, ABSENT).action)


@dataclass(frozen=True)
class _Untried:
    """A claim whose start its run never tried (``orchestrators.starter.Startable``)."""

    order_id: str
    instance_id: str

    def orchestration_input(self) -> dict[str, Any]:
        return {"orderId": self.order_id}


@covers("orchestrators.starter.release_untried")
def untried_release(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The run that claimed the attempt (the starter) or the round (the supervisor), its start never tried (the run's
    time for starts spent), releases it right after its starts: a fenced write as the claim's instance."""
    owner = _owner(scene)
    orchestrator = COMPENSATION if is_compensation_instance(owner) else SCHEDULER
    return f"released {release_untried(ctx, orchestrator, [_Untried(order_id, owner)])}"


@covers("activities.scheduler_steps.begin_step")
def late_start(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The start that failed landed after all (its 500 came after the backend took it): the instance begins its
    first step, fenced once the supervisor released the record, and announces ``Processing`` as the attempt's first
    ``begin_step`` does. A lost response of this write beside a ``received_mark`` ended without the status sent
    (its run again took the mark landed since for its own write's: tests/notifications/
    test_processing_after_a_lost_begin.py)."""
    return _outcome(_begin(ctx, order_id, _owner(scene), "reserve-inventory", "inventory", 1, announce=True))


@covers("supervisor.compensation_rounds.claim_due_compensations")
def rounds(ctx: AppContext, order_id: str, scene: Scene) -> str:
    claims = claim_due_compensations(ctx)
    return f"starts {len(claims.starts)} failed {claims.failed} stale {len(claims.stale_instances)}"


@covers("supervisor.compensation_rounds.claim_due_compensations")
def round_start_missed(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The supervisor's rounds, the backend answering 404 for the round's instance (``ABSENT``)."""
    claims = claim_due_compensations(ctx, statuses={_owner(scene): ABSENT})
    return f"starts {len(claims.starts)} failed {claims.failed} stale {len(claims.stale_instances)}"


@covers("supervisor.owed.acknowledge")
def owed_sweep(ctx: AppContext, order_id: str, scene: Scene) -> str:
    record = ctx.states.get(order_id)
    if record is None or not owes_notifications(record):
        return "nothing owed"
    return "delivered" if deliver_owed(ctx, record) else "not delivered"


@covers("supervisor.operator._resubmit_once")
def operator_resubmit(ctx: AppContext, order_id: str, scene: Scene) -> str:
    taken = resubmit_action(ctx, order_id, "op-a", "fixed")
    return "repeated" if taken.repeated else "resubmitted"


@covers("supervisor.operator._compensate_once")
def operator_compensate(ctx: AppContext, order_id: str, scene: Scene) -> str:
    taken = compensate_action(ctx, order_id, "op-b", "undo it")
    return "repeated" if taken.repeated else "compensated"


@covers("operations.actions._cancel_once")
def operator_cancel(ctx: AppContext, order_id: str, scene: Scene) -> str:
    return f"http {actions.cancel(ctx, order_id, 'op-c', 'customer called').status}"


@covers("operations.actions.claim_answer")
def review_answer(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """An operator's answer as the ops API notes it (the event raised after it is the Durable runtime's)."""
    target = actions.review_to_answer(ctx, order_id, str(scene.review_id), "retry", "op-r")
    if not isinstance(target, actions.ReviewTarget):
        return f"http {getattr(target, 'status', type(target).__name__)}"
    if target.noted is not None:
        return "noted already"
    claimed = actions.claim_answer(ctx, order_id, target.pending, "op-r", "retry", "try again")
    if isinstance(claimed, actions.NotedMeanwhile):  # the same answer noted since it was read: "noted already"
        return "noted already"
    return "noted" if isinstance(claimed, StateRecord) else f"http {claimed.status}"


@covers("supervisor.owed._note_alert_sent")
def owed_sweep_refused(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The owed sweep while the submitter's queue refuses the app: the alert goes out and is noted on the record
    (``OwedAlertSent``), the status stays owed."""
    sender = ctx.sender
    assert isinstance(sender, WritersSender)
    return owed_sweep(replace(ctx, sender=sender.refusing(CLIENT)), order_id, scene)


@covers("operations.actions.take_back_answer")
def review_taken_back(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The operator's noted answer taken back: the raise found the paused attempt gone (``take_back_answer``)."""
    target = actions.review_to_answer(ctx, order_id, str(scene.review_id), "compensate", "op-earlier")
    if not isinstance(target, actions.ReviewTarget):
        return f"http {getattr(target, 'status', type(target).__name__)}"
    taken = actions.take_back_answer(ctx, order_id, target.pending, "op-earlier", "compensate", "instance gone")
    return f"http {taken.status}"


@covers("activities.scheduler_steps.settle_retired_attempt")
def retired_settle(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The attempt, replaying under a retired scheduler version, releases the record it holds."""
    owner = _owner(scene)
    return _outcome(settle_retired_attempt(ctx, SettleRetiredInput(order_id=order_id, instance_id=owner, attempt=1)))


@covers("submission.cancellation._cancel_once", "submission.cancellation._tell_rejected")
def client_cancel(ctx: AppContext, order_id: str, scene: Scene) -> str:
    cancel = CancelOrder(type="CancelOrder", schema_version=1, order_id=order_id, reason="changed my mind")
    message = FakeReceivedMessage.of(cancel.to_json(), message_id="cancel-1")
    return str(cancel_order(ctx, cancel, message, []).settlement.kind)


@covers("deferral.payment.apply_notification")
def payment(ctx: AppContext, order_id: str, scene: Scene) -> str:
    note = PaymentNotification(
        type="PaymentNotification",
        schema_version=1,
        notification_id="n-1",
        order_id=order_id,
        amount_cents=1000,
        currency="EUR",
        provider_reference="psp-1",
    )
    return apply_notification(ctx, note, 41, owed=[]).kind


@covers("submission.intake._owe_received")
def received_mark(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """A redelivery of the creating message whose ``Received`` send failed: the mark (``_owe_received``)."""
    record = ctx.states.get(order_id)
    assert record is not None
    marked = _owe_received(ctx, record)
    # marked, or its mark landed (a lost response) and whoever wrote next said Received and cleared it since
    landed = [e.event for e in marked.history].count(RECEIVED_OWED) > [e.event for e in record.history].count(
        RECEIVED_OWED
    )
    return "marked" if marked.received_owed is not None or landed else "not marked"


@covers("notifications.received.say_before_status")
def received_said(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """A status about to go out says the ``Received`` the record owes first, and clears the mark."""
    return str(say_before_status(ctx.states, ctx.sender, order_id, "Failed", ctx.clock.now()))


def _owner(scene: Scene) -> str:
    assert scene.owner is not None
    return scene.owner


@covers("activities.scheduler_steps.begin_step")
def begin_next(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The next step begun with the result of the one in flight: charge-payment after the reservation, or the
    pivot (arrange-shipment) after the capture."""
    owner = _owner(scene)
    if scene.next_write == 2:
        step, agent, completes = "charge-payment", "payment", StepResult(step="reserve-inventory", result=RESERVED)
    else:
        step, agent, completes = "arrange-shipment", "shipping", StepResult(step="charge-payment", result=CAPTURED)
    return _outcome(_begin(ctx, order_id, owner, step, agent, scene.next_write, completes=completes))


def _step_failure(
    kind: type[ReleaseForRetryInput] | type[FailOrderInput], order_id: str, scene: Scene, error: str
) -> Any:
    """The input of a forward step's failure (``release_for_retry``, ``fail_order``), as the attempt's next write."""
    owner = _owner(scene)
    return kind(
        order_id=order_id,
        instance_id=owner,
        step="reserve-inventory",
        attempt=_attempt(owner),
        error=error,
        write_number=scene.next_write,
    )


@covers("activities.scheduler_steps.release_for_retry")
def release(ctx: AppContext, order_id: str, scene: Scene) -> str:
    return _outcome(release_for_retry(ctx, _step_failure(ReleaseForRetryInput, order_id, scene, "timeout")))


@covers("activities.scheduler_steps.fail_order")
def fail(ctx: AppContext, order_id: str, scene: Scene) -> str:
    return _outcome(fail_order(ctx, _step_failure(FailOrderInput, order_id, scene, "out of stock")))


@covers("activities.scheduler_steps.mark_processed")
def processed(ctx: AppContext, order_id: str, scene: Scene) -> str:
    owner = _owner(scene)
    data = MarkProcessedInput(
        order_id=order_id,
        instance_id=owner,
        attempt=_attempt(owner),
        completes=StepResult(step="reserve-inventory", result=RESERVED),
        write_number=scene.next_write,
    )
    return _outcome(mark_processed(ctx, data))


@covers("activities.compensation_steps.request_compensation")
def ask_compensation(ctx: AppContext, order_id: str, scene: Scene) -> str:
    owner = _owner(scene)
    step = "charge-payment" if scene.review_id else "reserve-inventory"
    data = RequestCompensationInput(
        order_id=order_id,
        instance_id=owner,
        step=step,
        attempt=_attempt(owner),
        error="refused",
        reason="compensating",
        write_number=scene.next_write,
    )
    return _outcome(request_compensation(ctx, data))


@covers("activities.compensation_steps.await_review")
def pause_for_review(ctx: AppContext, order_id: str, scene: Scene) -> str:
    owner = _owner(scene)
    data = AwaitReviewInput(
        order_id=order_id,
        instance_id=owner,
        step="reserve-inventory",
        attempt=_attempt(owner),
        review_id=f"{owner}:reserve-inventory:review:1",
        until=ctx.clock.now() + REVIEW_WAIT,
        error="refused",
        reason="high impact",
        default_action="compensate",
        amount_cents=250_000,
        write_number=scene.next_write,
    )
    return _outcome(await_review(ctx, data))


@covers("activities.compensation_steps.close_review")
def close(ctx: AppContext, order_id: str, scene: Scene) -> str:
    owner = _owner(scene)
    data = CloseReviewInput(
        order_id=order_id,
        instance_id=owner,
        attempt=_attempt(owner),
        review_id=str(scene.review_id),
        default_action="compensate",
        write_number=scene.next_write,
    )
    return _outcome(close_review(ctx, data))


@covers("activities.compensation_steps.record_undo")
def undo_recorded(ctx: AppContext, order_id: str, scene: Scene) -> str:
    data = RecordUndoInput(
        order_id=order_id,
        instance_id=_owner(scene),
        seq=int(scene.seq or 0),
        result={"releaseId": "rel-1"},
        write_number=scene.next_write,
    )
    return _outcome(record_undo(ctx, data))


@covers("activities.compensation_steps.fail_compensation")
def undo_failed(ctx: AppContext, order_id: str, scene: Scene) -> str:
    return _outcome(fail_compensation(ctx, _undo_input(FailCompensationInput, order_id, scene, error="refused")))


@covers("activities.compensation_steps.finish_compensation")
def finished(ctx: AppContext, order_id: str, scene: Scene) -> str:
    data = FinishCompensationInput(order_id=order_id, instance_id=_owner(scene), write_number=scene.next_write)
    return _outcome(finish_compensation(ctx, data))


@covers("activities.compensation_steps.begin_undo")
def undo_begun(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The round begins its undo (its first write, or the next try after a backoff)."""
    return _outcome(_begin_undo(ctx, order_id, scene))


@covers("activities.compensation_steps.hold_undo")
def undo_held(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The undo failed transiently: the round holds its record through the backoff before the next try."""
    return _outcome(_hold(ctx, order_id, scene))


@covers("activities.compensation_steps.release_undo")
def undo_released(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The undo met its service's open circuit: the round hands its record to the supervisor and ends."""
    return _outcome(_release_undo(ctx, order_id, scene))


@covers("supervisor.owed.note_status_sent")
def status_noted(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The orchestration's try of the failure status the record owes, on its timers (``publish_status``): sent, and
    noted on the record (``OwedStatusSent``) while still owed."""
    assert scene.status is not None
    status, attempt = scene.status
    return _outcome(publish_status(ctx, PublishStatusInput(order_id=order_id, status=status, attempt=attempt)))


WRITERS: dict[str, Act] = {
    act.__name__: _guard(act)
    for act in (
        starter,
        supervisor,
        start_missed,
        late_start,
        untried_release,
        rounds,
        round_start_missed,
        owed_sweep,
        owed_sweep_refused,
        review_taken_back,
        retired_settle,
        operator_resubmit,
        operator_compensate,
        operator_cancel,
        review_answer,
        client_cancel,
        payment,
        received_mark,
        received_said,
        begin_next,
        release,
        fail,
        processed,
        ask_compensation,
        pause_for_review,
        close,
        undo_recorded,
        undo_failed,
        finished,
        undo_begun,
        undo_held,
        undo_released,
        status_noted,
    )
}
# The writers whose every write must be made by the instance holding ``lockedBy`` (a side note aside).
FENCED = frozenset(
    {
        "begin_next",
        "late_start",
        "untried_release",
        "release",
        "fail",
        "processed",
        "ask_compensation",
        "pause_for_review",
        "close",
        "undo_recorded",
        "undo_failed",
        "finished",
        "retired_settle",
        "undo_begun",
        "undo_held",
        "undo_released",
    }
)

SUBMISSION_SIDE = ("payment", "received_mark", "client_cancel", "operator_cancel")
FORWARD = ("begin_next", "release", "fail", "processed", "ask_compensation", "pause_for_review", "retired_settle")

# record state -> (how it is built, the writers that may act on it)
SCENES: dict[str, tuple[Callable[[AppContext, str], Scene], tuple[str, ...]]] = {
    "pending": (build_pending, ("starter", *SUBMISSION_SIDE)),
    "pending_owed": (build_pending_owed, ("starter", "received_said", *SUBMISSION_SIDE)),
    "pending_retry": (build_pending_retry, ("starter", *SUBMISSION_SIDE)),
    "running": (build_running, (*FORWARD, *SUBMISSION_SIDE)),
    "running_owed": (build_running_owed, ("begin_next", "fail", "processed", "received_said", *SUBMISSION_SIDE)),
    "expired": (build_expired, ("supervisor", *FORWARD, *SUBMISSION_SIDE)),
    "claimed": (build_claimed, ("untried_release", *SUBMISSION_SIDE)),
    "start_missed": (build_start_missed, ("start_missed", "late_start", "untried_release", *SUBMISSION_SIDE)),
    "expired_last": (build_expired_last, ("supervisor", "begin_next", "release", "fail", *SUBMISSION_SIDE)),
    "charging": (build_charging, ("begin_next", "release", "fail", "ask_compensation", *SUBMISSION_SIDE)),
    "charging_expired": (
        build_charging_expired,
        ("supervisor", "begin_next", "release", "ask_compensation", *SUBMISSION_SIDE),
    ),
    "processed_owed": (build_processed_owed, ("received_said", *SUBMISSION_SIDE)),
    "review": (build_review, ("review_answer", "close", "ask_compensation", "fail", *SUBMISSION_SIDE)),
    "review_due": (build_review_due, ("supervisor", "review_answer", "close", "ask_compensation", *SUBMISSION_SIDE)),
    "review_noted_due": (
        build_review_noted_due,
        ("supervisor", "review_answer", "close", "review_taken_back", *SUBMISSION_SIDE),
    ),
    "review_noted": (
        build_review_noted,
        ("review_taken_back", "review_answer", "close", "fail", *SUBMISSION_SIDE),
    ),
    "error": (
        build_error,
        (
            "owed_sweep",
            "owed_sweep_refused",
            "status_noted",
            "operator_resubmit",
            "operator_compensate",
            *SUBMISSION_SIDE,
        ),
    ),
    "compensating": (build_compensating, ("rounds", "operator_compensate", *SUBMISSION_SIDE)),
    "round_claimed": (build_round_claimed, ("undo_begun", "rounds", "untried_release", *SUBMISSION_SIDE)),
    "round_start_missed": (
        build_round_start_missed,
        ("round_start_missed", "undo_begun", "untried_release", *SUBMISSION_SIDE),
    ),
    "round": (build_round, ("undo_recorded", "undo_failed", "undo_held", "undo_released", "rounds", *SUBMISSION_SIDE)),
    "round_stuck": (
        build_round_stuck,
        ("rounds", "undo_recorded", "undo_failed", "undo_held", "undo_released", *SUBMISSION_SIDE),
    ),
    "round_held": (build_round_held, ("undo_begun", "undo_failed", "rounds", *SUBMISSION_SIDE)),
    "round_held_stuck": (build_round_held_stuck, ("rounds", "undo_begun", *SUBMISSION_SIDE)),
    "round_released": (build_round_released, ("rounds", "undo_released", *SUBMISSION_SIDE)),
    "round_undone": (build_round_undone, ("finished", "rounds", *SUBMISSION_SIDE)),
    "compensation_failed": (
        build_compensation_failed,
        (
            "owed_sweep",
            "owed_sweep_refused",
            "status_noted",
            "operator_compensate",
            "operator_resubmit",
            *SUBMISSION_SIDE,
        ),
    ),
}


# What A's process holds of the record when it starts: "own" (a fenced writer: the version its previous write
# returned), "cold" (nothing: a worker that restarted), "shared" (B runs in A's process: its write is in A's cache).
CACHES = ("own", "cold", "shared")
# The writers that start from what their process holds (``StateStore.recent``).
CACHED = FENCED | {"received_said"}


@dataclass(frozen=True)
class Case:
    scene: str
    a: str  # reads first, and finishes last
    b: str  # writes its whole write in between
    after_read: int  # A's read (or write) after which B runs (1: its first)
    cache: str = "own"

    @property
    def name(self) -> str:
        return f"{self.scene}:{self.a}<{self.b}@{self.after_read}/{self.cache}"


def all_pairs() -> Iterator[tuple[str, str, str]]:
    for scene, (_, writers) in SCENES.items():
        for a in writers:
            for b in writers:
                yield scene, a, b


# --- one run --------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    document: str  # the final record, its order id taken out
    record: StateRecord | None
    a: str | None
    b: str | None
    a_wrote: bool
    a_reads: int
    audit: Audit
    sender: RecordingSender
    order_id: str
    owner: str | None  # the instance holding the record the run's scene built
    a_sent: frozenset[str] = frozenset()  # what A sent: "queue MessageId", its order id taken out


def normalised(record: StateRecord | None, order_id: str) -> str:
    if record is None:
        return "none"
    doc = to_document(replace(record, version=None))
    return json.dumps(doc, sort_keys=True, default=str).replace(order_id, "ORDER")


def setup(run: Run, scene_name: str) -> Scene:
    run.clock.set(T0)
    ctx, _ = run.ctx("setup")
    ctx.orders.create_or_verify(sample_order(run.order_id, total_cents=1000, prepaid=True))
    return SCENES[scene_name][0](ctx, run.order_id)


def writer_ctx(
    run: Run, label: str, writer: str, seed: int, cache: str = "own", process: CosmosStateStore | None = None
) -> tuple[AppContext, AuditedStore]:
    """A writer's process: its store's cache holds the current version when it is a fenced writer (its
    orchestration's previous write returned it), unless ``cache`` is "cold"; ``process``: the store (and its
    cache) of another writer's process, shared."""
    ctx, store = run.ctx(label, seed, process)
    if writer in FENCED and cache != "cold":
        store._inner.get(run.order_id)  # the version its previous write left in its process
    return ctx, store


def final(run: Run) -> StateRecord | None:
    return CosmosStateStore(run.cosmos_db.get_container_client(STATE_CONTAINER)).get(run.order_id)


def _outcome_of(run: Run, scene: Scene, a: str | None, b: str | None, a_store: AuditedStore | None) -> Outcome:
    record = final(run)
    return Outcome(
        normalised(record, run.order_id),
        record,
        a,
        b,
        any(w.writer == "A" for w in run.audit.writes),
        a_store.reads if a_store is not None else 0,
        run.audit,
        run.sender,
        run.order_id,
        scene.owner,
        frozenset(f"{queue} {message_id}" for writer, queue, message_id in run.sent if writer == "A"),
    )


def serial(run: Run, case: Case, *, a_first: bool) -> tuple[Outcome, Outcome]:
    """A then B, or B then A, each a process of its own; returns the outcome after both and after the first."""
    scene = setup(run, case.scene)
    a_ctx, a_store = writer_ctx(run, "A", case.a, 1)
    b_ctx, _ = writer_ctx(run, "B", case.b, 2)
    if a_first:
        a_result = WRITERS[case.a](a_ctx, run.order_id, scene)
        middle = _outcome_of(run, scene, a_result, None, a_store)
        b_result = WRITERS[case.b](b_ctx, run.order_id, scene)
    else:
        b_result = WRITERS[case.b](b_ctx, run.order_id, scene)
        middle = _outcome_of(run, scene, None, b_result, None)
        a_result = WRITERS[case.a](a_ctx, run.order_id, scene)
    return _outcome_of(run, scene, a_result, b_result, a_store), middle


def interleaved(run: Run, case: Case) -> Outcome:
    """A reads; after its ``after_read``-th read B makes its whole write; then A goes on."""
    scene = setup(run, case.scene)
    a_ctx, a_store = writer_ctx(run, "A", case.a, 1, case.cache)
    shared = a_store._inner if case.cache == "shared" else None
    b_ctx, _ = writer_ctx(run, "B", case.b, 2, case.cache, shared)
    b_result: list[str] = []

    def between() -> None:
        if not b_result and a_store.reads == case.after_read:
            b_result.append("running")
            b_result[0] = WRITERS[case.b](b_ctx, run.order_id, scene)

    a_store.after_read = between
    a_result = WRITERS[case.a](a_ctx, run.order_id, scene)
    return _outcome_of(run, scene, a_result, b_result[0] if b_result else None, a_store)
