"""The harness of ``test_redteam_lost_write_races.py``, beside ``two_writers.py`` (whose writers, record states,
audit and serial runs it reuses): races combined with lost responses, the outage-wait writers, and three writers.

- A lost response: one writer's ``nth`` replace of the record commits in Cosmos DB and its answer never comes
  back (``StoreUnavailable``, as ``tests/lost_writes.FlakyStates`` raises it: the SDK's timeout or a reset
  connection). The version it wrote is not in the writer's process cache (the SDK never returned it). The other
  writer may come in right there, between the commit and the error. Then the writer goes on as the real code
  does (``goes_on``): code that reads back a write of unknown outcome (``update_once_or_reread``) goes on by
  itself; an activity that raises is retried by Durable with the same input and write number (on the same
  worker, its cache as the lost write left it, or on another, cold); the supervisor and the starter run again on
  their next tick; an operator who got a 503 posts again; a submission message abandoned is delivered again.
- The outage-wait writers: the supervisor's recovery of an expired attempt (``transitions.wait_out_outage``) and
  of a stuck round (``wait_compensation_out``), and a round whose undo used up its tries in the outage
  (``fail_compensation`` -> ``release_round_to_wait``), over dependency health documents (the real
  ``CosmosHealthStore``) whose circuits opened before the step or round began and are open still.
- Three writers: A reads; after its k-th read (or write) B starts, and after B's m-th one C makes its whole
  write; then B goes on, then A."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from azure.cosmos.exceptions import CosmosResourceNotFoundError

from activities.compensation_steps import fail_compensation
from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.health_store import update_health
from adapters.cosmos.state_store import CosmosStateStore
from contracts.activities import FailCompensationInput, tries_used_up
from contracts.names import STATE_CONTAINER
from dependencies import AppContext
from domain.circuit import document_id, partition_key, record_failure
from supervisor.outage import DEPENDENCIES
from tests.orchestrators.support import sample_order
from tests.supervisor import two_writers as tw
from tests.supervisor.two_writers import (
    FENCED,
    SCENES,
    SUBMISSION_SIDE,
    WRITERS,
    AuditedStore,
    Outcome,
    Run,
    Scene,
    Write,
    final,
    normalised,
)

# --- a lost response ------------------------------------------------------------------------------------------


class LossyStore(AuditedStore):
    """A writer's audited store whose ``lose_at``-th replace of the order (counted over the writer's whole life,
    its retries included) commits and loses its response: the write is audited as made, the process cache keeps
    the version it had, the other writer may come in (``after_read``), then ``StoreUnavailable`` is raised."""

    def __init__(self, inner: CosmosStateStore, audit: tw.Audit, writer: str, order_id: str, lose_at: int | None):
        super().__init__(inner, audit, writer, order_id)
        self.lose_at = lose_at
        self.replaces = 0
        self.lost = False  # a response was lost in the writer's current run

    def replace(self, record: Any) -> Any:
        if record.order_id == self._order_id:
            self.replaces += 1
        if record.order_id != self._order_id or self.replaces != self.lose_at:
            return super().replace(record)
        base = self._audit.versions.get(record.version or "")
        # the write lands, through a store of its own: the SDK never returned it to this process's cache
        written = CosmosStateStore(self._inner._c).replace(record)
        self._audit.writes.append(Write(self._writer, base, written))
        self._audit.saw(written)
        self.lost = True
        self._read(True)  # while the response is on its way (and lost), the other writer may come in
        raise StoreUnavailable(f"no response to the replace of {record.order_id} (it committed)")


# The writers that run again on their own (a timer), whatever their previous run answered.
TICKS = frozenset({"starter", "supervisor", "rounds", "owed_sweep", "owed_sweep_refused"})
RETRIES = 2


def failed(answer: str) -> bool:
    """An answer that makes its writer's caller try again: an exception (a Durable activity is retried, a
    Functions trigger's message delivered again), a 503 to an operator, a message abandoned."""
    return answer.startswith("raised") or answer.startswith("http 5") or answer == "abandon"


# What a writer run again answers when it finds its first run's write made, and what that first run answered:
# a redelivered payment notification is a duplicate of the one applied, an operator's repeated post is taken.
REPEATED = {
    ("payment", "duplicate"): "applied",
    ("operator_resubmit", "repeated"): "resubmitted",
    ("operator_compensate", "repeated"): "compensated",
}


def goes_on(name: str, ctx: AppContext, store: LossyStore, order_id: str, scene: Scene, retry: str) -> str:
    """``name``'s whole write, and, after a response it lost, what its caller does next: run it again with the
    same input (``retry``: "same" process, its cache as the lost write left it, or "cold", another worker).
    The answer is the first that did not fail (a timer's next run after a run that went on by itself answers for
    itself), read as its first run's (``REPEATED``)."""
    answer = WRITERS[name](ctx, order_id, scene)
    for _ in range(RETRIES):
        if not store.lost or not (failed(answer) or name in TICKS):
            break
        store.lost = False
        if retry == "cold":
            store.forget_recent()
        again = WRITERS[name](ctx, order_id, scene)
        if failed(answer):
            answer = REPEATED.get((name, again), again)
    return answer


class StillClock:
    """The run's clock, which a writer's sleep (a retry's delay) does not move: every run of a case, serial or
    interleaved, writes at the same instant."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def now(self) -> Any:
        return self._inner.now()

    def sleep(self, seconds: float) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# --- the outage-wait writers and their record states ----------------------------------------------------------


def set_health(run: Run, outage: bool) -> None:
    """Every dependency's health document as the scene needs it: none (closed, nothing failed), or a circuit
    that opened a minute before the scene began (so before any step or round of it) and is open still."""
    container = run.cosmos_db.get_container_client(STATE_CONTAINER)
    for dependency in DEPENDENCIES:
        with contextlib.suppress(CosmosResourceNotFoundError):  # not there: nothing to delete
            container.delete_item(document_id(dependency), partition_key=partition_key(dependency))
    if not outage:
        return
    ctx, _ = run.ctx("setup")
    opened = run.clock.now() - timedelta(minutes=1)
    policy = ctx.settings.circuit_policy
    for dependency in DEPENDENCIES:
        for _ in range(policy.threshold):
            update_health(ctx.health, dependency, lambda h: (record_failure(h, opened, policy)[0], None), opened)


def undo_tries_used_up(ctx: AppContext, order_id: str, scene: Scene) -> str:
    """The round's undo used up its tries on transient failures: with its service's circuit open, the round
    releases the record to wait the outage out (``_waits_the_outage_out``), else the compensation fails."""
    data = FailCompensationInput(
        order_id=order_id,
        instance_id=tw._owner(scene),
        seq=int(scene.seq or 0),
        error=tries_used_up("inventory unavailable (503)", 3),
        write_number=scene.next_write,
    )
    return tw._outcome(fail_compensation(ctx, data))


WRITERS["undo_tries_used_up"] = tw._guard(undo_tries_used_up)
tw.COVERS["undo_tries_used_up"] = frozenset({"activities.compensation_steps._waits_the_outage_out"})
FENCED_HERE = FENCED | {"undo_tries_used_up"}

# record state -> (how it is built, the writers that may act on it); the circuits open from before it began
OUTAGE_SCENES: dict[str, tuple[Callable[[AppContext, str], Scene], tuple[str, ...]]] = {
    "expired_outage": (tw.build_expired, ("supervisor", "begin_next", "release", "fail", *SUBMISSION_SIDE)),
    "expired_last_outage": (tw.build_expired_last, ("supervisor", "begin_next", "release", *SUBMISSION_SIDE)),
    "round_outage": (
        tw.build_round,
        ("undo_tries_used_up", "undo_recorded", "undo_failed", "undo_released", "rounds", *SUBMISSION_SIDE),
    ),
    "round_stuck_outage": (
        tw.build_round_stuck,
        ("rounds", "undo_tries_used_up", "undo_recorded", "undo_released", *SUBMISSION_SIDE),
    ),
    # the round's undo met the open circuit and handed the record over (release_undo): the supervisor's next
    # run releases it to wait the outage out, uncounted
    "round_released_outage": (tw.build_round_released, ("rounds", "undo_released", *SUBMISSION_SIDE)),
}
ALL_SCENES = {**SCENES, **OUTAGE_SCENES}


def setup(run: Run, scene_name: str) -> Scene:
    run.clock.set(tw.T0)
    set_health(run, scene_name in OUTAGE_SCENES)
    ctx, _ = run.ctx("setup")
    ctx.orders.create_or_verify(sample_order(run.order_id, total_cents=1000, prepaid=True))
    return ALL_SCENES[scene_name][0](ctx, run.order_id)


def all_pairs() -> Iterator[tuple[str, str, str]]:
    for scene, (_, writers) in ALL_SCENES.items():
        for a, b in itertools.product(writers, repeat=2):
            yield scene, a, b


# --- one run ----------------------------------------------------------------------------------------------------


def writer(
    run: Run, label: str, name: str, seed: int, lose_at: int | None = None, cache: str = "own"
) -> tuple[AppContext, LossyStore]:
    """A writer's process (``two_writers.writer_ctx``), its store losing the response of its ``lose_at``-th
    replace of the record."""
    ctx, audited = tw.writer_ctx(run, label, name, seed, cache)
    if name in FENCED_HERE - FENCED and cache != "cold":
        audited._inner.get(run.order_id)  # the version its previous write left in its process
    store = LossyStore(audited._inner, run.audit, label, run.order_id, lose_at)
    return replace(ctx, states=store, clock=StillClock(ctx.clock)), store


@dataclass
class Result:
    """A run's outcome (``two_writers.Outcome``) and every writer's answer and sends."""

    outcome: Outcome
    answers: dict[str, str | None]
    sent: dict[str, frozenset[str]]
    wrote: dict[str, bool]

    @property
    def document(self) -> str:
        return self.outcome.document


def result(run: Run, scene: Scene, answers: dict[str, str | None], a_store: LossyStore | None) -> Result:
    record = final(run)
    labels = ("A", "B", "C")
    sent = {w: frozenset(f"{q} {m}" for who, q, m in run.sent if who == w) for w in labels}
    wrote = {w: any(x.writer == w for x in run.audit.writes) for w in labels}
    outcome = Outcome(
        normalised(record, run.order_id),
        record,
        answers.get("A"),
        answers.get("B"),
        wrote["A"],
        a_store.reads if a_store is not None else 0,
        run.audit,
        run.sender,
        run.order_id,
        scene.owner,
        sent["A"],
    )
    return Result(outcome, {k: (v.replace(run.order_id, "ORDER") if v else v) for k, v in answers.items()}, sent, wrote)


def serial_run(run: Run, scene_name: str, order: tuple[tuple[str, str], ...], lose: str = "", nth: int = 1) -> Result:
    """The writers of ``order`` ((label, writer) pairs) one after another, each a process of its own; ``lose``:
    the label whose ``nth`` replace loses its response (it goes on, retried in the same process). A label in
    ``order`` twice (a timer's writer again on its next tick) answers with its first run's answer, as ``goes_on``."""
    scene = setup(run, scene_name)
    answers: dict[str, str | None] = {}
    stores: dict[str, LossyStore] = {}
    for label, name in order:
        ctx, store = writer(run, label, name, SEEDS[label], nth if label == lose else None)
        stores[label] = store
        answers.setdefault(label, goes_on(name, ctx, store, run.order_id, scene, "same"))
    return result(run, scene, answers, stores.get("A"))


SEEDS = {"A": 1, "B": 2, "C": 3}  # each writer's random generator, the same in every run of a case


@dataclass(frozen=True)
class LostCase:
    """A pair at one interleaving, one response lost: A reads; after A's ``after``-th read or write (its lost
    write counts, at the moment it committed) B makes its whole write; then A goes on. ``lose``: whose ``nth``
    replace of the record loses its response ("A" or "B"); ``retry``: where a retried activity runs."""

    scene: str
    a: str
    b: str
    lose: str
    nth: int
    after: int
    retry: str = "same"

    @property
    def name(self) -> str:
        return f"{self.scene}:{self.a}<{self.b}@{self.after} lost {self.lose}#{self.nth}/{self.retry}"


def interleaved(run: Run, case: LostCase) -> Result:
    scene = setup(run, case.scene)
    a_ctx, a_store = writer(run, "A", case.a, 1, case.nth if case.lose == "A" else None)
    b_ctx, b_store = writer(run, "B", case.b, 2, case.nth if case.lose == "B" else None)
    answers: dict[str, str | None] = {}

    def between() -> None:
        if "B" not in answers and a_store.reads == case.after:
            answers["B"] = "running"
            answers["B"] = goes_on(case.b, b_ctx, b_store, run.order_id, scene, case.retry)

    a_store.after_read = between
    answers["A"] = goes_on(case.a, a_ctx, a_store, run.order_id, scene, case.retry)
    return result(run, scene, answers, a_store)


@dataclass(frozen=True)
class ThreeCase:
    """A reads; after its ``a_after``-th read or write B starts; after B's ``b_after``-th one C makes its whole
    write; B goes on, then A."""

    scene: str
    a: str
    b: str
    c: str
    a_after: int
    b_after: int

    @property
    def name(self) -> str:
        return f"{self.scene}:{self.a}<{self.b}@{self.a_after}<{self.c}@{self.b_after}"


def three(run: Run, case: ThreeCase) -> Result:
    scene = setup(run, case.scene)
    a_ctx, a_store = writer(run, "A", case.a, 1)
    b_ctx, b_store = writer(run, "B", case.b, 2)
    c_ctx, c_store = writer(run, "C", case.c, 3)
    answers: dict[str, str | None] = {}

    def c_between() -> None:
        if "C" not in answers and b_store.reads == case.b_after:
            answers["C"] = "running"
            answers["C"] = goes_on(case.c, c_ctx, c_store, run.order_id, scene, "same")

    def b_between() -> None:
        if "B" not in answers and a_store.reads == case.a_after:
            answers["B"] = "running"
            answers["B"] = goes_on(case.b, b_ctx, b_store, run.order_id, scene, "same")

    a_store.after_read = b_between
    b_store.after_read = c_between
    answers["A"] = goes_on(case.a, a_ctx, a_store, run.order_id, scene, "same")
    return result(run, scene, answers, a_store)
