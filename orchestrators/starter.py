"""The starter: claims Pending records with a conditional update and starts one orchestration per attempt.

Claims come from a timer sweep (``sweep``: records created Pending over the in-flight cap, and retries whose
not-before time has passed) and from submission's fast path, which creates a record already claimed
(``submission.intake``, under ``has_capacity``) and starts it here. The supervisor's compensation rounds are
started here too (``try_starts``).

After a claim, one of three things happens to its start:

- it is made: the instance runs;
- it is sent and fails: the claim is left to the supervisor after the start grace;
- it is never tried (the run's time for starts ran out): the run releases the claim at once
  (``release_untried``, ``StartReleased``), counting nothing. The supervisor releases its untried rounds the same
  way (``supervisor.compensation_rounds.release_untried_rounds``)."""

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
        """The scheduler's input, every version flag set (``orchestrators.scheduler.Attempt``)."""
        started = AttemptInput(
            order_id=self.order_id,
            attempt=self.attempt,
            plan=self.plan,
            timer_per_round=True,
            say_received=True if self.say_received else None,
            reviews_fit_fallback=True,
            deadline_at_begin=True,
            answers_give_up=True,
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
    """Claims ``record`` for its next attempt; None if it cannot be claimed or started now.

    None when another starter won the race (412), the record is not claimable yet, the in-flight cap is reached,
    or the order cannot be read for now. A claim whose response was lost is read back (``StoreUnavailable`` if it
    did not land).

    The order is read first, for the attempt's plan. If the store is unavailable, the record stays Pending and
    uncounted for the next sweep. An order that cannot be read at all (missing, or an error retrying will not
    cure) is claimed but not started: the supervisor then handles it as an attempt that never ran and, at
    ``MAX_FAILURES``, escalates with an alert instead of leaving the order Pending in silence (after
    ``MAX_STARTS_MISSED`` uncounted releases, since its instance never existed: ``transitions.start_missed``)."""
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
    # Attempt 1 claimed here was created Pending, and nothing on the record says whether the submitter heard
    # Received, so its first begin_step says it again (duplicates collapse). Later attempts: ``owe_if_unheard``.
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
    """Reads the order for a claim, saying whether a failure is transient."""
    try:
        order = ctx.orders.get(order_id)
    except StoreUnavailable as exc:
        return _OrderRead(problem=f"the order could not be read: {exc}", transient=True)
    except Exception as exc:  # an answer retrying will not change (403, 400, a document that does not decode)
        return _OrderRead(problem=f"the order cannot be read: {type(exc).__name__}: {exc}")
    if order is None and record.attempt == 0 and ctx.clock.now() - record.updated_at < ORDER_VISIBLE_WITHIN:
        # Submission writes the order before its record, so for a new, never-claimed record a 404 is a lagging
        # replica (Session consistency), not a missing order.
        return _OrderRead(problem="its order is not readable yet (the record is new)", transient=True)
    if order is None:
        return _OrderRead(problem="the state record has no order document")
    return _OrderRead(order=order)


def sweep(ctx: AppContext) -> list[Claim]:
    """Runs the timer sweep once: claims due Pending records, in a batch bounded by the in-flight cap.

    Claiming stops once a wave of starts could no longer end within the first claim's start grace
    (``claims_close``); the rest stay Pending for the next sweep. Otherwise, with a slow store, the later claims
    would be past their start grace before they start and be counted as failed attempts
    (tests/supervisor/test_claims_start_grace.py)."""
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
        except Exception as exc:  # isolation: a record that cannot be claimed (a hand edit) never stops the others
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

    A failed ``start_new`` is deliberately not retried here. The SDK raises the same plain Exception for a 500
    that came after the backend took the start, and a second ``start_new`` replaces an instance that already
    ended (``overridableExistingInstanceStates``: NonRunningStates). The record is left claimed by an instance
    that never ran, with ``completeBy`` = claim time + start grace. After that the supervisor releases it
    uncounted if the backend does not know the instance (up to ``MAX_STARTS_MISSED`` in a row), else treats it
    as a missed deadline (``supervisor.recovery``, ``supervisor.compensation_rounds``).

    Starts run ``PARALLEL_CALLS`` at a time, and none begins that could end past ``start_grace``
    (``adapters.durable_client.each_within``): a later start may already be the supervisor's, and a stalled
    extension would hold the run claims x 20 s. With ``ctx``, a claim whose start was never tried is released at
    once (``release_untried``), so it does not use up one of the order's ``MAX_STARTS_MISSED``. Without ``ctx``,
    or if the release cannot be written, the claim is left as after a failed start, and logged so."""
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
    """What ``try_starts`` did: the instance ids started (in the claims' order) and the claims never tried.

    ``untried`` had no ``start_new`` sent, so no instance exists: release them (``release_untried``) or leave
    them to the supervisor."""

    started: list[str]
    untried: list[Startable]


async def try_starts(
    client: OrchestrationClient, orchestrator: str, claims: Sequence[Startable], start_grace: timedelta
) -> StartsMade:
    """Makes the starts of ``start_orchestrations`` but leaves releasing the untried claims to the caller.

    The supervisor's trigger waits for its starts within a bound made for Durable calls
    (``supervisor/blueprint.py``), so it writes the releases after that wait, not inside it
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
    """Logs an untried claim left as after a failed start; ``why`` says why its release failed, if tried.

    The durableBackendFailing rule counts it as any failed start."""
    app_event(
        START_EVENTS[orchestrator][1],
        f"did not start {claim.instance_id}: {NOT_TRIED}{why}; the supervisor will retry it after the start grace",
        logging.WARNING,
        orderId=claim.order_id,
        instanceId=claim.instance_id,
        durableCall="start",
    )


def release_untried(ctx: AppContext, orchestrator: str, claims: Sequence[Startable]) -> list[str]:
    """Releases each claim whose start was never tried; returns the instance ids released. Never raises.

    Each release is a fenced write as the claim's instance (``update_fenced``), due again at once with no counter
    moved: a forward attempt back to Pending (``transitions.release_untried``), a compensation round unowned
    (``domain.compensation.release_untried_round``). Only a record still exactly that claim is released. One
    moved since, or not writable, is left to the supervisor and logged ``StartFailed`` /
    ``CompensationStartFailed``; a release is logged ``StartReleased`` / ``CompensationStartReleased``."""
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
    """Starts the scheduler for each claimed attempt (see ``start_orchestrations``)."""
    return await start_orchestrations(client, SCHEDULER, claims, start_grace, ctx)
