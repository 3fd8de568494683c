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
that ends an order well (``Processed``, ``Compensated``) is not made while ``Received`` is still owed:
the send's failure fails it, and its orchestration tries it again (``HAND_OVER_RETRY_DELAYS``); after
it, nobody would look at the record again. The MessageId is the status's own (``<orderId>:Received:0``),
so a repeat within duplicate detection's 10 minutes (the courier delivered it too) collapses; a later
one reaches the submitter as the same status again (docs/deferral.md, "Status messages")."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from adapters.servicebus.sender import MessageSender, SendError
from domain.records import StateRecord
from domain.states import ProcessState
from domain.transitions import SUBMISSION
from notifications.status import publish_status
from observability.events import app_event

# The history event of the write that marks ``Received`` owed.
RECEIVED_OWED = "ReceivedOwed"
# States after which nobody writes the record again: their write waits until ``Received`` is said.
_LAST_WORD = (ProcessState.PROCESSED, ProcessState.COMPENSATED)


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
    fails leaves the mark for the next writer (logged as ``StatusNotSent``), except in a write that ends
    the order well (``Processed``, ``Compensated``): then the ``SendError`` propagates and nothing is
    written, so the write is tried again. A status with nowhere to go (no ``replyTo``, a queue that does
    not exist or refuses the app: ``publish_status`` logs and alerts it) is owed no longer."""
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
        if record.process_state in _LAST_WORD:
            raise
        return record
    return replace(record, received_owed=None)
