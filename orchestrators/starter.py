"""The starter: claims Pending records with a conditional update and starts one orchestration
per attempt. Claims are made by a timer sweep (records created Pending over the in-flight cap, the
safety net, and retries whose not-before time has passed); submission's fast path creates a new
record already claimed instead (``submission.intake``, under ``has_capacity``) and starts it here.

A start that was sent and failed leaves its claim to the supervisor after the start grace. A claim whose start a
run never tried (its time for starts spent: a slow or stalled Durable extension) is released by that run right
after its starts (``release_untried``: Pending again, claimable at once, nothing counted; ``StartReleased``); the
supervisor's compensation rounds are started here too (``try_starts``) and their untried ones released the same
way by its run (``supervisor.compensation_rounds.release_untried_rounds``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from adapters.cosmos.errors import EtagMismatch, StoreUnavailable
from adapters.cosmos.state_store import update_fenced, update_once_or_reread
from adapters.durable_client import CallBudget, claims_close, each_within
from contracts.activities import AttemptInput, OrderPlan
from dependencies import AppContext
from domain import transitions
from domain.compensation import release_untried_round
from domain.errors import FencingLost, IllegalTransition
from domain.ids import url_instance_id
from domain.records import StateRecord
from domain.states import ProcessState
from domain.text import carriable
from observability.events import app_event
from orchestrators.attempt_plan import plan_attempt
from orchestrators.names import COMPENSATION, SCHEDULER


@dataclass(frozen=True)
class Claim:
    """An attempt claimed and ready to start, with the plan its orchestration gets as input.
    ``say_received``: its first ``begin_step`` says ``Received`` before its write (``AttemptInput``)."""

    order_id: str
    instance_id: str
    attempt: int
    plan: OrderPlan
    say_received: bool = False
    start_by: datetime | None = None  # its claim's completeBy: the claim's write time plus the start grace

    def orchestration_input(self) -> dict[str, Any]:
        started = AttemptInput(
            order_id=self.order_id,
            attempt=self.attempt,
            plan=self.plan,
            timer_per_round=True,
            say_received=True if self.say_received else None,
            reviews_fit_fallback=True,
            deadline_at_begin=True,
        )
        return started.to_json()


class OrchestrationClient(Protocol):
    """The part of ``DurableOrchestrationClient`` the starter uses."""

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any | None = None
    ) -> str: ...


def has_capacity(ctx: AppContext) -> bool:
    """The in-flight cap, on a cached count (not a scan per message)."""
    return ctx.counts.get(ProcessState.PROCESSING) < ctx.settings.max_in_flight


def try_claim(ctx: AppContext, record: StateRecord) -> Claim | None:
    """Claims ``record`` for its next attempt, or returns None when another starter won the
    race (412), the record is not claimable (yet), the in-flight cap is reached, or its order cannot
    be read for now. A claim whose response was lost is read again: if it landed, it is this claim
    (``StoreUnavailable`` otherwise).

    The order (immutable) is read first, for the attempt's plan: a store that is unavailable for now
    leaves the record Pending, unclaimed and uncounted, for the next sweep. An order that cannot be
    read at all (missing, or an error retrying will not cure) is claimed and not started: the attempt
    fails like any attempt that never ran, so the supervisor counts it and, at ``MAX_FAILURES``,
    escalates with an alert instead of leaving the order Pending in silence (after ``MAX_STARTS_MISSED``
    uncounted releases: its instance never existed, ``transitions.start_missed``)."""
    if not has_capacity(ctx):
        return None
    read = _read_order(ctx, record.order_id, record)
    if read.transient:
        app_event(
            "ClaimPostponed",
            f"order {record.order_id}: not claimed, {read.problem}; the next sweep tries again",
            logging.WARNING,
            orderId=record.order_id,
        )
        return None
    now = ctx.clock.now()
    try:
        claimed = update_once_or_reread(
            ctx.states, record, lambda r: transitions.claim(r, now, ctx.settings.start_grace)
        )
    except (EtagMismatch, IllegalTransition):
        return None
    if claimed.version is None:  # the claim landed, its response lost, and the record moved on since
        current = ctx.states.get(record.order_id)
        if current is None or current.locked_by != claimed.locked_by:
            return None  # another writer took it (a cancellation, a resubmit): nothing to start
        claimed = current  # still ours (a payment noted, a review answer): start it on what is stored
    if claimed.process_state is not ProcessState.PROCESSING or claimed.locked_by is None:
        return None
    ctx.counts.bump(ProcessState.PROCESSING, +1)
    ctx.counts.bump(ProcessState.PENDING, -1)
    if read.order is None:
        app_event(
            "StartFailed",
            f"order {claimed.order_id}: claimed for {claimed.locked_by} and not started, {read.problem}; "
            "the supervisor will retry it after the start grace",
            logging.ERROR,
            orderId=claimed.order_id,
            instanceId=claimed.locked_by,
        )
        return None
    plan = plan_attempt(ctx.settings, claimed, read.order)
    # An attempt 1 claimed here: its record was created Pending (over MAX_IN_FLIGHT), and nothing on it tells
    # whether its submitter heard Received (a send that failed and a mark that could not be written, or a creating
    # delivery that died first): its first begin_step says it again before its Processing (collapsed by duplicate
    # detection within 10 minutes). Later attempts: ``owe_if_unheard`` decides from the record.
    return Claim(
        claimed.order_id,
        claimed.locked_by,
        claimed.attempt,
        plan,
        say_received=claimed.attempt == 1,
        start_by=claimed.complete_by,
    )


@dataclass(frozen=True)
class _OrderRead:
    order: dict[str, Any] | None = None
    problem: str = ""  # why there is no order
    transient: bool = False  # the store is unavailable for now: a later read may succeed


# How long after a new record's write a 404 for its order is taken as a replica that has not caught up
# (``_read_order``), not as a missing order.
ORDER_VISIBLE_WITHIN = timedelta(minutes=1)


def _read_order(ctx: AppContext, order_id: str, record: StateRecord) -> _OrderRead:
    try:
        order = ctx.orders.get(order_id)
    except StoreUnavailable as exc:
        return _OrderRead(problem=f"the order could not be read: {exc}", transient=True)
    except Exception as exc:  # an answer retrying will not change (403, 400, a document that does not decode)
        return _OrderRead(problem=f"the order cannot be read: {type(exc).__name__}: {exc}")
    if order is None and record.attempt == 0 and ctx.clock.now() - record.updated_at < ORDER_VISIBLE_WITHIN:
        # Submission writes the order before its record: for a record never claimed, written moments ago, a 404 is
        # another instance's write this replica has not got yet (Session consistency), not an order that is missing.
        return _OrderRead(problem="its order is not readable yet (the record is new)", transient=True)
    if order is None:
        return _OrderRead(problem="the state record has no order document")
    return _OrderRead(order=order)


def sweep(ctx: AppContext) -> list[Claim]:
    """One run of the timer sweep: claims Pending records whose not-before time has passed, in a
    bounded batch that never exceeds the in-flight cap, and none once a wave of starts would no longer end
    within the first claim's start grace (``claims_close``): the records left are still Pending, claimed by the
    next sweep. Under a Cosmos DB answering in 8-10 s a request (an order read and a claim each), a batch of 50
    took minutes, and its claims, started after it, were past their start grace: all but the first wave left
    to the supervisor, each counted as a failed attempt."""
    room = ctx.settings.max_in_flight - ctx.counts.get(ProcessState.PROCESSING)
    budget = min(ctx.settings.starter_batch_size, room)
    if budget <= 0:
        app_event("StarterSaturated", "starter sweep: in-flight cap reached")
        return []
    claims: list[Claim] = []
    closes: datetime | None = None
    records = ctx.states.claimable(ctx.clock.now(), budget)
    for done, record in enumerate(records):
        if closes is not None and ctx.clock.now() >= closes:
            app_event(
                "StarterClaimsStopped",
                f"starter sweep: {len(records) - done} claimable records left for the next sweep, "
                f"{len(claims)} claimed: a later claim could not be started within the first one's start grace",
                logging.WARNING,
                claimed=len(claims),
                left=len(records) - done,
            )
            break
        try:
            claim = try_claim(ctx, record)
        except StoreUnavailable as exc:
            # Per record: the claims already made in this batch are still returned and started.
            app_event(
                "StartFailed",
                f"order {record.order_id}: not claimed, store unavailable: {exc}",
                logging.WARNING,
                orderId=record.order_id,
            )
            continue
        except Exception as exc:  # isolation: a record no claim can be made of never stops the others' claims
            # (one edited by hand: at MAX_ATTEMPT no next attempt can be numbered; the document broken between the
            # query and the claim's read-back); logged at each sweep while it lasts, the others claimed and started
            app_event(
                "StartFailed",
                f"order {record.order_id}: not claimed, {type(exc).__name__}: {carriable(str(exc))[:500]}",
                logging.ERROR,
                orderId=record.order_id,
            )
            continue
        if claim is not None:
            claims.append(claim)
            if closes is None and claim.start_by is not None:
                closes = claims_close(claim.start_by, ctx.settings.start_grace)
    return claims


class Startable(Protocol):
    """A claimed orchestration, ready to start: a forward attempt or a compensation round."""

    @property
    def order_id(self) -> str: ...

    @property
    def instance_id(self) -> str: ...

    def orchestration_input(self) -> dict[str, Any]: ...


# How starts are logged, per orchestrator: (started, start failed, claim released with its start never tried).
START_EVENTS: dict[str, tuple[str, str, str]] = {
    SCHEDULER: ("AttemptStarted", "StartFailed", "StartReleased"),
    COMPENSATION: ("CompensationStarted", "CompensationStartFailed", "CompensationStartReleased"),
}

# Why a claim's start was never tried (``start_orchestrations``): its history entry and its events say it.
NOT_TRIED = "the run's time for starts was spent"


async def start_orchestrations(
    client: OrchestrationClient,
    orchestrator: str,
    claims: Sequence[Startable],
    start_grace: timedelta,
    ctx: AppContext | None = None,
) -> list[str]:
    """Starts one ``orchestrator`` instance per claim; returns the instance ids started.

    If ``start_new`` fails after a claim, the record is deliberately left as it is: owned by an
    instance that never ran, with ``completeBy`` = claim time + start grace. The supervisor finds it
    when that passes: an attempt or round whose instance the backend does not know (a 404) is released
    without counting a failure, up to ``MAX_STARTS_MISSED`` in a row (``supervisor.recovery``,
    ``supervisor.compensation_rounds``), any other is handled like an instance that missed a deadline (retried; a
    compensation round is claimed again).
    Retrying here could start an instance the failed call had in fact created: the SDK raises the same
    plain Exception for a 500 that came after the backend took the start, and a second ``start_new``
    replaces an instance that already ended (``overridableExistingInstanceStates``: NonRunningStates).

    The starts run ``PARALLEL_CALLS`` at a time, and none is begun that could end past ``start_grace`` (what is
    left of the claims' start grace; ``adapters.durable_client.each_within``): a start made later is one the
    supervisor may already have taken over (the instance it makes is fenced), and a stalled extension would hold
    the run claims x 20 s. A claim whose start was never tried (no ``start_new`` was sent for it, so no instance
    of it exists) is released at once, with ``ctx``, by a fenced write (``release_untried``): Pending again (a
    round: due again), neither a failure nor a missed start counted. It used to be left as after a failed start,
    and the supervisor released it after the start grace as a start the backend never had, using one of the
    order's ``MAX_STARTS_MISSED``. A release that cannot be written (the record moved, the store unavailable), or
    a run without ``ctx``, leaves the claim as after a failed start, saying so."""
    made = await try_starts(client, orchestrator, claims, start_grace)
    if made.untried and ctx is not None:
        # off the event loop: a store write each
        await asyncio.to_thread(release_untried, ctx, orchestrator, made.untried)
    else:
        for claim in made.untried:
            left_to_supervisor(orchestrator, claim, "")
    return made.started


@dataclass(frozen=True)
class StartsMade:
    """What ``try_starts`` did: the instance ids started, in the claims' order, and the claims whose start it never
    tried (no ``start_new`` sent for them), to release (``release_untried``) or leave to the supervisor."""

    started: list[str]
    untried: list[Startable]


async def try_starts(
    client: OrchestrationClient, orchestrator: str, claims: Sequence[Startable], start_grace: timedelta
) -> StartsMade:
    """The starts of ``start_orchestrations`` without the releases of the claims never tried, for a caller that
    writes those itself once its wait for the starts is over: the supervisor's trigger waits for a batch's starts on
    its event loop within a bound made for Durable calls (``supervisor/blueprint.py``), and a store write each for
    the rounds never tried, under a Cosmos DB throttling them, ran that wait out although every start was made
    (``tests/supervisor/test_redteam_untried_release_wait.py``)."""
    started_event, failed_event, _ = START_EVENTS[orchestrator]
    asked: set[str] = set()  # the instances a start_new was sent for: never released here, whatever it answered

    async def start(claim: Startable) -> bool:
        asked.add(claim.instance_id)
        try:
            await client.start_new(orchestrator, url_instance_id(claim.instance_id), claim.orchestration_input())
        except Exception as exc:
            app_event(
                failed_event,
                f"could not start {claim.instance_id}: {exc}; the supervisor will retry it after the start grace",
                logging.WARNING,
                orderId=claim.order_id,
                instanceId=claim.instance_id,
                durableCall="start",  # a Durable call that failed, not the store: the durableBackendFailing rule's
            )
            return True
        started.append(claim.instance_id)
        app_event(started_event, f"started {claim.instance_id}", orderId=claim.order_id, instanceId=claim.instance_id)
        return True

    started: list[str] = []
    phase = "compensationStarts" if orchestrator == COMPENSATION else "starts"  # DurablePhaseStopped's phase
    made = await each_within(phase, claims, start, CallBudget(start_grace))
    untried = [claim for claim, tried in zip(claims, made, strict=True) if not tried and claim.instance_id not in asked]
    order = {claim.instance_id: i for i, claim in enumerate(claims)}
    return StartsMade(sorted(started, key=order.__getitem__), untried)


def left_to_supervisor(orchestrator: str, claim: Startable, why: str) -> None:
    """Logs a claim whose start was never tried and that is left as after a failed start (``why``: why its release
    failed, when one was tried). Counted by the durableBackendFailing rule as any start the extension failed."""
    app_event(
        START_EVENTS[orchestrator][1],
        f"did not start {claim.instance_id}: {NOT_TRIED}{why}; the supervisor will retry it after the start grace",
        logging.WARNING,
        orderId=claim.order_id,
        instanceId=claim.instance_id,
        durableCall="start",
    )


def release_untried(ctx: AppContext, orchestrator: str, claims: Sequence[Startable]) -> list[str]:
    """Releases each of ``claims``, whose start was never tried, by a fenced write (``update_fenced``: as its
    instance, ``lockedBy`` checked on the record the write replaces, a 412 read again and judged again): a forward
    attempt back to Pending, claimable at once (``transitions.release_untried``), a compensation round unowned and
    due at once (``domain.compensation.release_untried_round``), ``failureCount``, ``startsMissed`` and ``attempt``
    unchanged. Only a record that is still exactly that claim (its instance holds it and made no move) is released:
    one another writer moved since (the supervisor took it, a cancellation) is left to it, and one the store could
    not write is left as after a failed start, for the supervisor; both say so (``StartFailed``,
    ``CompensationStartFailed``). Returns the instance ids released (each logged ``StartReleased`` or
    ``CompensationStartReleased``). Never raises."""
    released_event = START_EVENTS[orchestrator][2]
    compensation = orchestrator == COMPENSATION
    released: list[str] = []
    for claim in claims:
        owner = claim.instance_id

        def release(record: StateRecord, owner: str = owner) -> StateRecord:
            now = ctx.clock.now()
            if compensation:
                return release_untried_round(record, owner, now, transitions.SUPERVISOR, NOT_TRIED)
            return transitions.release_untried(record, owner, now, NOT_TRIED)

        try:
            written = update_fenced(ctx.states, claim.order_id, owner, release)
        except (FencingLost, IllegalTransition) as exc:
            why = f", and it was not released: the record moved since its claim ({carriable(str(exc))[:300]})"
            left_to_supervisor(orchestrator, claim, why)
            continue
        except Exception as exc:  # the store unavailable, a lost answer not read back, anything: the claim stays
            why = f", and it could not be released: {type(exc).__name__}: {carriable(str(exc))[:300]}"
            left_to_supervisor(orchestrator, claim, why)
            continue
        if not compensation:
            ctx.counts.bump(ProcessState.PROCESSING, -1)
            ctx.counts.bump(ProcessState.PENDING, +1)
        released.append(owner)
        app_event(
            released_event,
            f"did not start {owner}: {NOT_TRIED}; released ({written.process_state.value}, due again now), "
            "not counted as a failure or a missed start",
            orderId=claim.order_id,
            instanceId=owner,
        )
    return released


async def start_claimed(
    client: OrchestrationClient, claims: Sequence[Claim], start_grace: timedelta, ctx: AppContext | None = None
) -> list[str]:
    """Starts the scheduler for each claimed attempt (see ``start_orchestrations``; with ``ctx``, a claim whose
    start was never tried is released at once)."""
    return await start_orchestrations(client, SCHEDULER, claims, start_grace, ctx)
