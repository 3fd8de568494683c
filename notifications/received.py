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
says ``Received`` once more after it and, while that fails, fails (``say_before_the_last_word``), so its
orchestration tries it again (``HAND_OVER_RETRY_DELAYS``, about six hours), finds the write made, and
sends the order's final status only once ``Received`` went out. The MessageId is the status's own
(``<orderId>:Received:0``), so a repeat within duplicate detection's 10 minutes (the courier delivered
it too) collapses; a later one reaches the submitter as the same status again (docs/deferral.md,
"Status messages")."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from adapters.cosmos.errors import EtagMismatch, StoreUnavailable
from adapters.cosmos.state_store import StateStore, update_once
from adapters.servicebus.sender import MessageSender, SendError
from domain.records import StateRecord
from domain.states import ProcessState
from domain.transitions import SUBMISSION
from notifications.status import publish_status
from observability.events import app_event

# The history events of the write that marks ``Received`` owed, and of the one that clears it on an
# order that ended well (``say_before_the_last_word``).
RECEIVED_OWED = "ReceivedOwed"
RECEIVED_SAID = "ReceivedSaid"
# States after which nobody writes the record again.
_LAST_WORD = (ProcessState.PROCESSED, ProcessState.COMPENSATED)

log = logging.getLogger(__name__)


def owe_received(record: StateRecord, now: datetime) -> StateRecord:
    """``record`` marked as owing its submitter ``Received`` (submission's send of it failed)."""
    if record.received_owed is not None:
        return record
    return record.with_changes(
        now, RECEIVED_OWED, SUBMISSION, "the Received status could not be sent", received_owed=now
    )


def say_owed_received(sender: MessageSender, record: StateRecord, at: datetime) -> StateRecord:
    """``record`` as a write is about to store it: if it owes ``Received``, the status is sent now, before
    the write (and before any status the write makes true), and the write clears the mark. A send that
    fails leaves the mark for the next writer (logged as ``StatusNotSent``); never raises. A status with
    nowhere to go (no ``replyTo``, a queue that does not exist or refuses the app: ``publish_status``
    logs and alerts it) is owed no longer."""
    if record.received_owed is None:
        return record
    try:
        publish_status(sender, reply_to=record.reply_to, order_id=record.order_id, status="Received", attempt=0, at=at)
    except SendError as exc:
        app_event(
            "StatusNotSent",
            f"order {record.order_id}: status Received, owed since {record.received_owed.isoformat()}, "
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
    loses a race or meets a store failure is only logged, the status is out). A send that fails raises
    ``SendError``: the activity fails and its orchestration tries it again, which finds its write made and
    comes back here, before the order's final status is sent. Any other record is returned as it is."""
    if record.received_owed is None or record.process_state not in _LAST_WORD:
        return record
    publish_status(sender, reply_to=record.reply_to, order_id=record.order_id, status="Received", attempt=0, at=at)
    event = record.history[-1].event if record.history else record.process_state.value
    try:
        return update_once(
            states,
            record,
            lambda r: r.with_changes(
                at, RECEIVED_SAID, SUBMISSION, f"said after {writer}'s {event}", received_owed=None
            ),
        )
    except (EtagMismatch, StoreUnavailable) as exc:
        log.info("order %s: Received said, its mark not cleared: %s", record.order_id, exc)
        return record
