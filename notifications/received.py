"""The ``Received`` status a submitter may not have heard: owed on the state record.

Submission says ``Received`` once the state record is written and hands a failed send to the courier
(``notifications.status.hand_to_courier``), but the trigger does that only after the handler returns: a
host that stops in between (or a lost lock, then a redelivery that finds the order begun) leaves nobody
to say it. So a failed send is also marked on the record (``receivedOwed``, one conditional write on that
failure path only: ``owe_received``), and whoever next writes the record says it first, clearing the
mark in that same write when the send went out (``say_owed_received``): the scheduler's and the
compensation round's fenced writes (``activities.fencing.write_fenced``, so the attempt's first
``begin_step`` says it before its ``Processing``), the supervisor's recovery of an expired attempt,
its claim of a compensation round and its owed sweep of failure records (``supervisor.owed``), and a
redelivery of the order (which says it while the mark is there, even after a step has begun). A write
that ends an order well (``Processed``, ``Compensated``) is made all the same (a submitter's queue that
refuses for a while must not fail its order), but nobody would write the record again: its activity
says ``Received`` once more after it (``say_before_the_last_word``), and while that fails the order's
final status is not sent there but on its orchestration's durable timers (``FINAL_RETRY_DELAYS``, about
six hours), each try saying ``Received`` first and failing while it cannot (``say_before_status``);
those tries are counted apart from the status's own (``orchestrators.status``), and the last of either count gives
the final status up and alerts it (``StatusUndelivered``), as for any final status. No other
status but ``Rejected`` goes out before it either: the ``publish_status`` activity says it before any status it
sends (``say_before_status``), the attempt's ``Processing`` and the supervisor's "waiting for" statuses are not sent
while the write before them left it owed (a ``begin_step`` run again that finds its write made says it first:
``say_received_unwritten``), and the ``CancelOrder`` handler says it before ``CancellationRejected``
(``say_received_first``) or hands that status to the courier (a queue full for a while failed every try of
``Received``, and the first status tried once it drained reached the submitter first).
The MessageId is the status's own (``<orderId>:Received:0``), so a repeat within duplicate detection's
10 minutes (the courier delivered it too) collapses; a later one reaches the submitter as the same status
again (docs/deferral.md, "Status messages").

A reply queue that refuses this app (``Delivery.REFUSED``: missing, or the app's role on it still
propagating) is owed ``Received`` like one that fails (submission marks it and hands it to the courier),
for ``orchestrators.status.REFUSED_RETRY_WINDOW`` from the mark: a refusal within it leaves the mark (and a
final status waits for it), one after it drops ``Received`` and clears the mark in the same write (the
queue's ``ReplyQueueUnavailable`` alert stands for it)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from adapters.cosmos.errors import EtagMismatch, StoreUnavailable
from adapters.cosmos.state_store import StateStore, update_once
from adapters.servicebus.sender import MessageSender, SendError
from domain.records import RECEIVED_OWED, RECEIVED_SAID, StateRecord
from domain.states import ProcessState
from domain.timefmt import to_text
from domain.transitions import STEP_STARTED, SUBMISSION
from notifications.status import Delivery, publish_status
from observability.events import app_event
from orchestrators.status import NOT_AFTER_RECEIVED, refusal_retried

# ``RECEIVED_OWED``, ``RECEIVED_SAID`` (domain.records): the history events of the write that marks
# ``Received`` owed, and of the one that clears it on an order that ended well (``say_before_the_last_word``).
# States after which nobody writes the record again, and the final statuses that tell them. The only ended states a
# version cached by this process may be trusted in: ``Error`` and ``CompensationFailed`` end an order only until an
# operator resubmits or compensates it (another instance, whose next attempt or round may mark ``Received`` owed).
_LAST_WORD = (ProcessState.PROCESSED, ProcessState.COMPENSATED)

log = logging.getLogger(__name__)


def owe_received(record: StateRecord, now: datetime) -> StateRecord:
    """``record`` marked as owing its submitter ``Received`` (submission's send of it failed)."""
    if record.received_owed is not None:
        return record
    return record.with_changes(
        now, RECEIVED_OWED, SUBMISSION, "the Received status could not be sent", received_owed=now
    )


def owe_if_unheard(record: StateRecord, now: datetime, *, unsure: bool = False) -> StateRecord:
    """``record`` as the first step of an attempt is about to write it: owing ``Received`` (``receivedOwed``,
    no history entry: the same write says it and clears the mark, ``say_owed_received``) when no attempt of the
    order began a step and either

    - this is not its first attempt, so its first claim never started. That is the path of a creating delivery
      that lost its create's response (or died) before it said ``Received`` or could mark it owed: nothing on
      the record says it is unsaid, and the store-retry copy that would say it can come minutes later, after
      this step's ``Processing`` (lost-restarts-locks, 100 orders, seed 11: ``ord-00004``, the runner's
      ``statuses_before_received``); or
    - the attempt's input says its submitter may not have heard it (``unsure``, ``AttemptInput.say_received``):
      an attempt 1 the starter claimed (the record was created ``Pending``, and the same paths leave it unsaid
      with nothing on it), or submission's fast-path claim whose ``receivedOwed`` mark could not be written
      after the send failed (``ReceivedMarkGivenUp``). Before, the courier alone said it, after this step's
      ``Processing`` when the submitter's queue failed its first tries (``localrun fuzz`` seeds 147, 152, 212,
      289, 1018 and 1071, 8-29 % of Cosmos DB requests throttled).

    A submitter that heard it already hears it again (collapsed within duplicate detection's 10 minutes); the
    happy path (submission's own claim, its ``Received`` sent) sends nothing more."""
    if record.received_owed is not None or (record.attempt <= 1 and not unsure):
        return record
    if any(entry.event == STEP_STARTED for entry in record.history):
        return record
    return replace(record, received_owed=now)


def owe_before_failure(record: StateRecord, now: datetime) -> StateRecord:
    """``record`` as a failure write (``Error``, ``CompensationFailed``) or a cancellation (``Compensating``) is about
    to store it: owing ``Received`` (no history entry) when no attempt of the order ever began a step, so nothing
    on the record says it was heard.

    - A creating delivery that lost its create's response and could not read it back leaves such a record, and
      the supervisor can escalate its never-started claim before the store-retry copy says ``Received`` (fuzz
      seed 4421, ``MAX_FAILURES`` 1 and 37 % lost Cosmos DB responses: ``Failed`` before ``Received``). The owed
      sweep then says ``Received`` before the failure.
    - A delivery whose send failed and whose ``receivedOwed`` mark was given up (``ReceivedMarkGivenUp``) leaves
      one too, and a cancellation before the first step began would have the compensation round say
      ``Compensating`` and ``Compensated`` while only the courier had ``Received``; the round's claim says it
      first instead.

    A submitter that heard it already hears it again (collapsed within duplicate detection's 10 minutes). Failure
    and cancellation paths only: the happy path sends nothing more."""
    if record.received_owed is not None or any(entry.event == STEP_STARTED for entry in record.history):
        return record
    return replace(record, received_owed=now)


def say_owed_received(sender: MessageSender, record: StateRecord, at: datetime) -> StateRecord:
    """``record`` as a write is about to store it: if it owes ``Received``, the status is sent now, before
    the write (and before any status the write makes true), and the write clears the mark. A send that
    fails leaves the mark for the next writer (logged as ``StatusNotSent``), and so does a queue that refuses
    the app within ``REFUSED_RETRY_WINDOW`` of the mark (``publish_status`` logs and alerts it); never raises.
    A status with nowhere to go (no ``replyTo``, a queue still refusing past the window) is owed no longer."""
    if record.received_owed is None:
        return record
    try:
        if _still_owed(record, _say(sender, record, at), at):
            return record
    except SendError as exc:
        app_event(
            "StatusNotSent",
            f"order {record.order_id}: status Received, owed since {to_text(record.received_owed)}, "
            f"not sent ({exc}); still owed",
            logging.WARNING,
            orderId=record.order_id,
            status="Received",
        )
        return record
    return replace(record, received_owed=None)


def say_before_the_last_word(
    states: StateStore, sender: MessageSender, record: StateRecord, at: datetime, writer: str
) -> StateRecord:
    """After a write that ended the order well (``Processed``, ``Compensated``) and still owes ``Received``
    (its own try, ``say_owed_received``, failed): ``Received`` again, and on success one conditional write
    that clears the mark (``ReceivedSaid``, in submission's name: ``writer`` is in its detail; a write that
    loses a race or meets a store failure is only logged, the status is out). A send that fails is logged
    (``StatusNotSent``) and the record returned still owing it, as is one its queue refuses within
    ``REFUSED_RETRY_WINDOW``: the order's final status must then wait for it, sent on its orchestration's
    durable timers (``say_before_status``). Any other record is returned as it is. Never raises
    ``SendError``."""
    if record.received_owed is None or record.process_state not in _LAST_WORD:
        return record
    try:
        said = _say_and_clear(states, sender, record, at, f"said after {writer}'s {_last_event(record)}")
    except SendError as exc:
        app_event(
            "StatusNotSent",
            f"order {record.order_id}: status Received, owed since {to_text(record.received_owed)}, "
            f"not sent after the order's {record.process_state.value} ({exc}); its final status waits for it",
            logging.WARNING,
            orderId=record.order_id,
            status="Received",
        )
        return record
    return record if said is None else said  # None: its queue refused it, still owed


def say_before_status(
    states: StateStore, sender: MessageSender, order_id: str, status: str, at: datetime, read: StateRecord | None = None
) -> bool:
    """Before any status but ``Received`` and ``Rejected`` is sent on an orchestration's timers or by the courier
    (the ``publish_status`` activity: ``Completed`` and ``Compensated``, ``Failed`` and ``CompensationFailed``,
    ``Compensating``, ``CancellationRejected``): ``Received`` if the record still owes it, and its mark cleared
    (``say_received_first``). A send that fails raises ``SendError``: that try of the status fails, and its timers
    try again (the last try gives it up and alerts it, ``notifications.status.give_up``; a progress status is tried
    once). False: the reply queue refused ``Received`` within ``REFUSED_RETRY_WINDOW`` of its mark, still owed: the
    status waits (that try answers refused). A record this process has a version of that ended well (``Processed``,
    ``Compensated``: nobody moves it on) is not read again: a mark is never set on it, only cleared, so a version
    without it needs nothing, and one with it is said and cleared by a write conditional on that version (a 412 means
    it was cleared already, and this ``Received`` was a repeat). Any other is read: submission may have marked it
    since, and so may an attempt or round after an operator moved an ``Error`` or ``CompensationFailed`` on, on
    another instance while this one kept the failure (Flex Consumption runs several: the Error version trusted, a
    ``Completed`` went out with the ``Received`` the record owed unsaid,
    tests/supervisor/test_redteam_scaleout.py). ``read``: the record as the caller read it for this status just now,
    used as it is (no second read)."""
    if status in NOT_AFTER_RECEIVED:
        return True
    record = read if read is not None else states.recent(order_id)
    if record is None or (read is None and record.process_state not in _LAST_WORD):
        record = states.get(order_id)
    return record is None or say_received_first(states, sender, record, at, status)


def say_received_first(
    states: StateStore, sender: MessageSender, record: StateRecord, at: datetime, status: str
) -> bool:
    """Before ``status`` of ``record``'s order is sent by code holding ``record`` (a version it read or wrote):
    ``Received`` if that version still owes it, then the mark cleared by one conditional write (``ReceivedSaid``, in
    submission's name; a lost race or a store failure is only logged: the status is out). True: nothing owed, or
    said now; False: its queue refused it within ``REFUSED_RETRY_WINDOW`` of the mark (still owed, nothing written).
    ``SendError`` propagates. A status sent while ``Received`` is owed and unsaid would reach the submitter first
    once its queue takes sends again (a full queue draining: the runner's ``statuses_before_received``)."""
    if record.received_owed is None:
        return True
    detail = f"said before the {status} status, after {_last_event(record)}"
    return _say_and_clear(states, sender, record, at, detail) is not None


def say_received_unwritten(sender: MessageSender, record: StateRecord, at: datetime) -> bool:
    """Before a progress status of ``record``'s order sent by code that writes the record no more (the attempt's
    first ``begin_step`` run again, finding its write made: ``activities.scheduler_steps``): ``Received`` if that
    version owes it, its mark left on the record for its next writer, who says it again (the same MessageId: a
    repeat within duplicate detection's 10 minutes collapses) and clears it; no write here, so the record stays
    as a serial order of the writers leaves it. True: nothing owed, or said now (or refused past
    ``REFUSED_RETRY_WINDOW``: dropped); False: its queue refused it within that window. ``SendError``
    propagates."""
    if record.received_owed is None:
        return True
    return not _still_owed(record, _say(sender, record, at), at)


def _last_event(record: StateRecord) -> str:
    return record.history[-1].event if record.history else record.process_state.value


def _say_and_clear(
    states: StateStore, sender: MessageSender, record: StateRecord, at: datetime, detail: str
) -> StateRecord | None:
    """``Received``, then the mark cleared by one conditional write (``ReceivedSaid``, in submission's name;
    a lost race or a store failure is only logged: the status is out). ``SendError`` propagates; a refusal
    within ``REFUSED_RETRY_WINDOW`` of the mark returns None: still owed, nothing written."""
    if _still_owed(record, _say(sender, record, at), at):
        return None
    try:
        return update_once(
            states, record, lambda r: r.with_changes(at, RECEIVED_SAID, SUBMISSION, detail, received_owed=None)
        )
    except (EtagMismatch, StoreUnavailable) as exc:
        log.info("order %s: Received said, its mark not cleared: %s", record.order_id, exc)
        return record


def _say(sender: MessageSender, record: StateRecord, at: datetime) -> Delivery:
    return publish_status(
        sender, reply_to=record.reply_to, order_id=record.order_id, status="Received", attempt=0, at=at
    )


def _still_owed(record: StateRecord, delivery: Delivery, at: datetime) -> bool:
    """Whether ``Received``, just tried, stays owed: its queue refused it within ``REFUSED_RETRY_WINDOW`` of the
    mark (``receivedOwed``)."""
    owed_since = record.received_owed
    return delivery is Delivery.REFUSED and owed_since is not None and refusal_retried(owed_since, at)
