"""What every orchestration activity shares: reading the record it must own, and the fenced write.

An activity answers ``NotOwned`` (``contracts.activities``) once its instance no longer holds ``lockedBy``; the
orchestration then ends quietly. The write itself (``update_fenced``) logs the state transition;
a lost record is logged here, once, as ``FencingLost``. A write its orchestration numbered is also
refused when the same instance already made a later one (``domain.write_order``): a late second run
of the activity, logged as ``StaleWriteRefused`` and answered ``NotOwned`` (nobody reads that answer:
its orchestration took the first run's)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial

from adapters.cosmos.state_store import read_as_owner, update_fenced
from contracts.messages import AgentRequest
from dependencies import AppContext
from domain.errors import FencingLost, StaleWrite, WriteAlreadyMade
from domain.records import SIDE_NOTES, StateRecord, last_move
from domain.states import ProcessState
from domain.write_order import in_write_order
from notifications.received import say_before_the_last_word, say_owed_received
from observability.events import app_event

log = logging.getLogger(__name__)


def deadline_from_now(request: AgentRequest, timeout_seconds: float | None, now: datetime) -> AgentRequest:
    """The request with its step's (or undo's) deadline: with ``timeout_seconds`` (an instance started with
    ``deadlineAtBegin``), the writing activity's time plus it, or the request's own if later (computed at the
    orchestration's replay time, when its episode began): an activity queued behind a backlog for as long as the
    timeout wrote a deadline already past, and its agent dropped the request unread. Without, the request's (an
    instance started before, whose timers race that one)."""
    if timeout_seconds is None:
        return request
    deadline = max(request.deadline, now + timedelta(seconds=timeout_seconds))
    return request.model_copy(update={"deadline": deadline})


def owned_record(ctx: AppContext, order_id: str, instance_id: str, state: ProcessState) -> StateRecord | None:
    """The record, if ``instance_id`` holds it in ``state``; None otherwise (a read, no write; ``StaleRead`` for a
    read from before the instance's own claim: ``read_as_owner``)."""
    record = read_as_owner(ctx.states, order_id, instance_id, ctx.clock.sleep)
    if record is None or record.locked_by != instance_id or record.process_state is not state:
        return None
    return record


def write_fenced(
    ctx: AppContext,
    order_id: str,
    instance_id: str,
    change: Callable[[StateRecord], StateRecord],
    where: str,
    hand_over: str | None = None,
    number: int | None = None,
    on_written: Callable[[], None] | None = None,
) -> StateRecord | None:
    """``update_fenced``; None when ``instance_id`` lost the record (logged as ``FencingLost``).
    Store failures propagate: the activity fails (the orchestration retries it on a durable timer)
    and, if it keeps failing, the supervisor recovers the record.

    ``hand_over`` names the event of a write that releases the record (``Processed``, ``Failed``...).
    A retry of such a write can find that its first execution did write, then failed before
    answering: the record's last write is this instance's own ``hand_over`` event with
    ``lockedBy`` cleared. That is this very write, done; it is answered as done, not as lost.

    ``number``: the write's number in its orchestration (``domain.write_order``; None: not judged). An
    older number than the owner's newest is refused (None, ``StaleWriteRefused``); the same number is
    this write made already, answered with the record as it is (nothing written, ``on_written`` not called) while
    the instance still holds it; a record taken since is lost (None, ``FencingLost``), except after a hand-over,
    which is done whoever holds the record now (when the instance's newest move is that hand-over: the same
    number may have made another write of the activity's, ``fail_compensation``'s release to wait an outage out).
    Such a hand-over, found made with the record moved on since (``moved_on``: an operator resubmitted or compensated
    the order again, the next attempt or round claimed it), is answered with the record as it is now: its activity
    must not act on it as its own (``fail_order`` and ``fail_compensation`` page nobody and answer ``MOVED_ON``, so
    their orchestration tells the submitter nothing). ``Processed`` and ``Compensated`` cannot be moved on from.
    ``on_written``: called once this very call made the write (not when it finds the write done by an
    earlier run of the activity): what must happen once per write, such as a cached count.

    A record that still owes its submitter ``Received`` (``receivedOwed``) has it said before the write,
    which clears the mark (``notifications.received.say_owed_received``). A write that ended the order
    well (``Processed``, ``Compensated``) while the send failed says it again after it
    (``say_before_the_last_word``); the record returned still owes it if that failed too, and the order's
    final status must then wait for it (``notifications.received.say_before_final_status``)."""
    written = _write_fenced(ctx, order_id, instance_id, change, where, hand_over, number, on_written)
    if written is None:
        return None
    # an order ended well that still owes Received: said now, or its final status waits for it
    return say_before_the_last_word(ctx.states, ctx.sender, written, ctx.clock.now(), instance_id)


def _write_fenced(
    ctx: AppContext,
    order_id: str,
    instance_id: str,
    change: Callable[[StateRecord], StateRecord],
    where: str,
    hand_over: str | None,
    number: int | None,
    on_written: Callable[[], None] | None,
) -> StateRecord | None:
    """The write itself, for ``write_fenced``."""

    def change_and_say(record: StateRecord) -> StateRecord:
        # a Received the submitter may not have heard is said before this write, which clears its mark
        return say_owed_received(ctx.sender, change(record), ctx.clock.now())

    try:
        written = update_fenced(
            ctx.states,
            order_id,
            instance_id,
            partial(in_write_order, owner=instance_id, number=number, change=change_and_say),
            pause=ctx.clock.sleep,
        )
    except WriteAlreadyMade as made:  # a retry, or a late run of the newest write: made already
        found: StateRecord = made.record
        if found.locked_by != instance_id and (hand_over is None or not _handed_over(found, instance_id, hand_over)):
            # made while the instance held the record, taken since (the supervisor retried it, another attempt
            # claimed it): not the instance's any more, whatever its own write did (a hand-over is done either way,
            # if it is what the number made: fail_compensation's may be its round's release to wait an outage out)
            _fencing_lost(order_id, instance_id, found.locked_by, where)
            return None
        log.info("order %s: write #%s of %s (%s) is on the record already", order_id, made.number, instance_id, where)
        return found
    except StaleWrite as exc:
        app_event(
            "StaleWriteRefused",
            f"{exc.expected} already wrote #{exc.last} on order {exc.order_id}; its write #{exc.number} ({where}) "
            "is a late duplicate, refused",
            logging.WARNING,
            orderId=exc.order_id,
            instanceId=exc.expected,
            writeNumber=exc.number,
            lastWriteNumber=exc.last,
        )
        return None
    except FencingLost as exc:
        current = ctx.states.get(order_id)
        # this very hand-over, run again: its write is the released record's last move, past the side notes
        # written on it since (an owed Received said, a payment notification applied)
        if (
            hand_over is not None
            and current is not None
            and current.locked_by is None
            and (last := last_move(current)) is not None
            and (last.by, last.event) == (instance_id, hand_over)
        ):
            return current
        _fencing_lost(order_id, instance_id, exc.actual, where)
        return None
    if on_written is not None:
        on_written()
    return written


def moved_on(record: StateRecord, instance_id: str) -> bool:
    """Whether someone else moved the record since the instance's last write (``write_fenced``'s answer to a
    hand-over): its last move, past the side notes, is not the instance's. Only a hand-over found made by an
    earlier run of its activity can be answered so: an operator resubmitted the failed order or compensated it
    again, the next attempt or round claimed it, or the supervisor delivered and acknowledged what a failure
    write owed (``supervisor.owed``). What the hand-over's activity does after the write on the record's word
    (an operator alert under ``record.attempt``, the submitter's final status) is then no longer its to do: the
    record speaks for a later attempt, or for an operator's action, or was told already. The failure status its
    orchestration is still retrying after a first run that answered is stopped the same way, by the status activity
    (``activities.scheduler_steps.failure_moved_on``)."""
    last = last_move(record)
    return last is not None and last.by != instance_id


def _handed_over(record: StateRecord, instance_id: str, hand_over: str) -> bool:
    """Whether the instance's newest move on the record is ``hand_over``: its write found made is this hand-over, not
    another write of the same number (``fail_compensation`` numbers its release to wait an outage out and its
    ``CompensationFailed`` the same). A history that no longer holds a move of the instance's says nothing
    against it."""
    for entry in reversed(record.history):
        if entry.by == instance_id and entry.event not in SIDE_NOTES:
            return entry.event == hand_over
    return True


def _fencing_lost(order_id: str, instance_id: str, locked_by: str | None, where: str) -> None:
    app_event(
        "FencingLost",
        f"{instance_id} no longer owns order {order_id} ({where}); stopping",
        orderId=order_id,
        instanceId=instance_id,
        lockedBy=locked_by,
    )
