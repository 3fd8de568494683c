"""The state record: one per order (stored as one document in the Cosmos DB container ``state``).

Records are frozen dataclasses, changed with ``dataclasses.replace``; timestamps are timezone-aware
UTC ``datetime``. Their JSON form (camelCase field names: ``orderId``, ``lockedBy``, ``completeBy``...;
the stored document and the operator API's view) is mapped in ``adapters/cosmos/mapping.py``.
``version`` is an opaque token of the stored version a record was read at: the store
(``adapters/cosmos``, where it is Cosmos' ``_etag``) replaces a record only if it is still that version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from domain.ids import MAX_ATTEMPT, instance_number, instance_order_id
from domain.jsonvalues import Invalid, shown
from domain.states import ProcessState, StepStatus
from domain.workflow import AGENTS

SCHEMA_VERSION = 1
HISTORY_LIMIT = 50
# A history entry's ``detail`` is cut to this many characters: it may quote an error an agent sent (up to a
# reply's 64 KB), and 50 such copies would not fit the record's one Cosmos DB item (2 MB, measured on the JSON
# the service receives, where the SDK escapes every character past ASCII: up to 12 bytes for one). Cut, 50
# entries take 600 KB at most. What the app parses in a detail (a review's id, action and deadline) comes first.
DETAIL_LIMIT = 1000
# An error the record keeps (``lastError``, a step's ``error``, a compensation entry's ``error``) is cut to this
# many characters when the record is built (every writer's record is): it may quote an agent's error of up to a
# reply's 64 KB, 390 KB as sent (DEL, 1 byte of UTF-8, is 6 escaped). What the app reads in one (a waiting
# reason, a payment wait given up, MAX_OUTAGE_WAIT_MINUTES) comes first.
ERROR_LIMIT = DETAIL_LIMIT
# A step's result the record keeps takes at most this many bytes as the store sends it (``stored_size``), as
# many as a reply's whole body: the app's agent refuses a bigger answer of a forward step as it refuses one no
# reply can carry (``order_agents.runtime``: a transient failure, the outcome unknown). A compensation entry's
# ``data`` is part of its step's result. With the cuts above, the largest record the app makes is about 1 MB
# as sent, of an item's 2 MB (tests/adapters/test_record_fits_an_item.py).
RESULT_LIMIT = 64 * 1024


def stored_size(value: Any) -> int:
    """The bytes ``value`` takes as the store sends it: JSON, every character past ASCII escaped (the
    azure-cosmos SDK's ``json.dumps``; an emoji is 12 bytes, DEL 6)."""
    return len(json.dumps(value, separators=(",", ":")))


# The largest integer the store keeps exactly: Cosmos DB documents keep numbers as IEEE 754 doubles (the protocol
# server of the tests, a JavaScript one, rounds 2**64 - 1 to 18446744073709552000, and keeps null for one past a
# double's range). A step result or an undo's answer holding a larger one would change on the record, silently.
MAX_EXACT_INT = 2**53 - 1


def inexact_integer(value: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], int] | None:
    """The first integer in ``value`` (a JSON value, at any depth) the store would not keep exactly, and where it is;
    None when there is none. A bool is no integer here."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (path, value) if abs(value) > MAX_EXACT_INT else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = inexact_integer(item, (*path, str(key)))
        if found is not None:
            return found
    return None


def _cut_error(kept: Any, name: str) -> None:
    """Cuts the error text ``kept.<name>`` to ``ERROR_LIMIT`` characters (a frozen dataclass, being built)."""
    text = getattr(kept, name)
    if text is not None and len(text) > ERROR_LIMIT:
        object.__setattr__(kept, name, text[:ERROR_LIMIT])


def _known_agent(agent: str) -> None:
    """An entry's ``agent`` must be the workflow's (``domain.workflow.AGENTS``): the document of one naming another (a
    hand edit) does not fit, skipped and paged by the supervisor's queries (``UnmappedDocument``); read, every
    recovery of its expired attempt raised on it (``unknown agent``), every run, for ever. (A step's ``agents``, the
    ones it was started with, may name any: an undo goes only to those of them the step can use.)"""
    if agent not in AGENTS:
        raise Invalid(f"expected one of the workflow's agents, got {shown(agent)}", ("agent",))


# History events that note a fact beside the attempt's progress, written by others than the attempt
# (submission): a payment notification applied, a ``Received`` owed or said; the supervisor's owed sweep
# noting a failure's operator alert sent while the status its reply queue refuses stays owed, and the
# ``publish_status`` activity noting that status sent on the orchestration's timers (``supervisor.owed``).
# They are not a move of the record: what the attempt last did (a review requested, an answer noted to it) is
# still its last word.
PAYMENT_NOTIFIED = "PaymentNotified"
RECEIVED_OWED = "ReceivedOwed"
RECEIVED_SAID = "ReceivedSaid"
OWED_ALERT_SENT = "OwedAlertSent"
OWED_STATUS_SENT = "OwedStatusSent"
SIDE_NOTES = frozenset({PAYMENT_NOTIFIED, RECEIVED_OWED, RECEIVED_SAID, OWED_ALERT_SENT, OWED_STATUS_SENT})


@dataclass(frozen=True, slots=True, kw_only=True)
class StepState:
    status: StepStatus
    agent: str
    request_id: str
    attempt: int
    started_at: datetime
    finished_at: datetime | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    # Every agent the step was started with, across attempts, in order (``transitions.begin_step`` adds
    # each): a request can only have gone to one of them. None in a record written before the field: not
    # known, so an undo of unknown outcome goes to every agent the step can use.
    agents: list[str] | None = None
    # The stored entry's keys this code does not know (a newer version's fields): kept while the entry is
    # changed (``replace``), written back by the store; an entry made anew has none. Never compared.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _known_agent(self.agent)
        _cut_error(self, "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class CompensationEntry:
    """One completed, compensable step and what its undo needs (references only, never card data)."""

    seq: int
    step: str
    agent: str
    undo_action: str
    data: dict[str, Any]
    attempt: int
    at: datetime
    outcome: str | None = None  # None (not undone yet) | "Undone" | "Failed"
    outcome_at: datetime | None = None
    error: str | None = None
    # What the undo answered (the step's ``undo_result_data``: e.g. ``refundId``, null when it found
    # nothing to refund, and ``amountCents``); None: not undone yet, or undone before it was kept.
    undo_result: dict[str, Any] | None = None
    # The operator who undid the entry by hand after its undo failed (``domain.compensation.settle_by_hand``):
    # ``outcome`` is then Undone by their word, not by an undo the app sent; None otherwise.
    undone_by: str | None = None
    # The stored entry's keys this code does not know (a newer version's fields): kept while the entry is
    # changed (``replace``), written back by the store; an entry made anew has none. Never compared.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _known_agent(self.agent)
        _cut_error(self, "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryEntry:
    at: datetime
    event: str
    by: str
    detail: str = ""
    # The stored entry's keys this code does not know (a newer version's fields): kept while the entry is
    # changed (``replace``), written back by the store; an entry made anew has none. Never compared.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class PaymentReceived:
    """A prepaid order's ``PaymentNotification``, as applied to its state record (references only)."""

    notification_id: str
    amount_cents: int
    currency: str
    provider_reference: str
    received_at: datetime
    sequence_number: int | None = None  # of the orders-queue message that carried it
    # The stored entry's keys this code does not know (a newer version's fields): kept while the entry is
    # changed (``replace``), written back by the store; an entry made anew has none. Never compared.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class LastWrite:
    """The newest fenced write an orchestration instance made on the record: the instance, and the
    number its orchestration gave the write (``domain.write_order``)."""

    by: str
    number: int
    # The stored entry's keys this code does not know (a newer version's fields): kept while the entry is
    # changed (``replace``), written back by the store; an entry made anew has none. Never compared.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewDefault:
    """What the attempt paused for review ``review_id`` takes when nobody answers by its deadline (the
    ``default_action`` it passed to ``await_review``: the configured default, ``compensate`` for a second
    review left unanswered, as ``review_outcome`` reads it where no fallback can take over)."""

    review_id: str
    action: str
    # The stored entry's keys this code does not know (a newer version's fields): kept while the entry is
    # changed (``replace``), written back by the store; an entry made anew has none. Never compared.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateRecord:
    id: str
    order_id: str
    process_state: ProcessState
    locked_by: str | None = None
    complete_by: datetime | None = None
    failure_count: int = 0
    attempt: int = 0
    reply_to: str | None = None
    current_step: str | None = None
    steps: dict[str, StepState] = field(default_factory=dict)
    compensation: list[CompensationEntry] = field(default_factory=list)
    last_error: str | None = None
    payment: PaymentReceived | None = None  # prepaid orders: the provider's notification, once applied
    # Since when the order has been waiting out an open dependency without spending its retry budget
    # (supervisor/outage.py); cleared when a step succeeds.
    outage_wait_since: datetime | None = None
    # Since when a prepaid order's payment step has been waiting for the payment notification beyond its
    # deadlines, released by the supervisor without spending its retry budget (domain/payment_wait.py);
    # cleared when a step succeeds, a failure is counted, compensation begins or an operator resubmits.
    payment_wait_since: datetime | None = None
    # The owner's newest numbered write: an older one of the same owner is a late duplicate, refused.
    last_write: LastWrite | None = None
    # Since when the submitter may not have heard ``Received``: set only when submission's send of it
    # failed (notifications/received.py), cleared by the write of whoever says it next.
    received_owed: datetime | None = None
    # The sequence number, as its sender sent it (``submission.store_outage.original_sequence``), of the
    # ``OrderSubmitted`` whose delivery created the record: that message handled again (a redelivery, a
    # store-retry copy) cannot know whether its first delivery said ``Received``, so it says it again.
    submitted_as: int | None = None
    # The default of the review the attempt last paused for (``domain.review``), kept until its next review
    # replaces it: it names its review, so one written by an older version's pause is never read as this
    # one's. None in a record written before the field: the default is not known.
    review_default: ReviewDefault | None = None
    # How many attempts (or compensation rounds) in a row the Durable backend never had: each claimed, its start
    # failed and its instance unknown to the backend at its deadline (a 404), released by the supervisor without
    # counting a failure (``domain.transitions.start_missed``), up to ``MAX_STARTS_MISSED``; reset when an attempt
    # begins a step, a round an undo, the order enters compensation, or an operator resubmits. 0 in a record written
    # before the field: none known.
    starts_missed: int = 0
    history: list[HistoryEntry] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    updated_at: datetime
    # The stored version this was read at, opaque (None: never stored); the store writes only over
    # that version (adapters/cosmos: the item's ``_etag``). Never part of the document.
    version: str | None = None
    # The stored document's keys this code does not know (a newer version's fields, read after a rollback):
    # the store writes them back unchanged over the version read. Never compared, never mapped.
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # What no writer of the app makes and the store cannot read as its order's (a hand edit): the document does
        # not fit (``mapping.DocumentError`` naming the field), so every reader leaves it as it is and the
        # supervisor's and starter's queries skip it, logged and paged (``UnmappedDocument``). Read, a record stored
        # under another order's id was claimed for that order (its instance started as the other order's, its
        # attempts numbered over that order's), and one owned by another order's instance had the supervisor wait
        # on that instance, then terminate it: the other order's live attempt.
        if self.order_id != self.id:
            raise Invalid(f"expected the document's id (its order's), got {shown(self.order_id)}", ("orderId",))
        owner = None if self.locked_by is None else instance_order_id(self.locked_by)
        if owner is not None and owner != self.order_id:
            raise Invalid(f"expected an instance of its order, got {shown(self.locked_by)}", ("lockedBy",))
        # Nothing holds a Pending record (every move to Pending clears ``lockedBy``): held, no claim took it and no
        # query of the supervisor's selects a Pending one, the order waited for ever without a trace.
        if self.process_state is ProcessState.PENDING and self.locked_by is not None:
            raise Invalid(f"expected null on a Pending record, got {shown(self.locked_by)}", ("lockedBy",))
        _cut_error(self, "last_error")
        # A count below 0 is a hand edit of the document: none, or it would buy that many more releases (uncounted
        # starts missed; failures before Error or CompensationFailed and its page), the order never escalated.
        for count in ("starts_missed", "failure_count"):
            if getattr(self, count) < 0:
                object.__setattr__(self, count, 0)
        # A lowered ``attempt`` is read as the record shows it where records are read (``attempt_as_shown``).
        # Past ``MAX_ATTEMPT`` no instance id is one an agent replies to and no request or status carries the
        # attempt (``contracts.messages``): every attempt would fail to send, its Error's status never said.
        if self.attempt > MAX_ATTEMPT:
            raise Invalid(f"expected an attempt of at most {MAX_ATTEMPT}, got {shown(self.attempt)}", ("attempt",))

    def with_changes(self, now: datetime, event: str, by: str, detail: str = "", **changes: Any) -> StateRecord:
        """A copy with ``changes`` applied, ``updatedAt`` set and the change noted in ``history`` (``detail`` cut
        to ``DETAIL_LIMIT``)."""
        entry = HistoryEntry(at=now, event=event, by=by, detail=detail[:DETAIL_LIMIT])
        history = [*self.history, entry][-HISTORY_LIMIT:]
        return replace(self, **{**changes, "updated_at": now, "history": history})


# The longest id ``instance_id`` and ``compensation_instance_id`` build (an order id of 64, the marker, 9 digits).
MAX_INSTANCE_ID_LENGTH = 100


def attempt_as_shown(record: StateRecord) -> StateRecord:
    """``record`` as read from its document, its ``attempt`` at least what the record itself shows
    (``shown_attempt``). ``attempt`` only grows (attempts and compensation rounds share it): one below that is a hand
    edit, and the next claim would number its instance as an earlier one (``ids.instance_id``), whose start_new
    replaces that finished instance's history, whose fenced writes a later one's ``lastWrite`` refuses, and whose
    owner ``read_as_owner`` reads as stale for ever; a negative one would give ids no agent replies to. Applied by the
    store to what it reads, not to every record made (the app's own moves never lower it, and the history's scan
    is about 0.1 ms a record)."""
    highest = shown_attempt(record)
    return record if record.attempt >= highest else replace(record, attempt=highest)


def shown_attempt(record: StateRecord) -> int:
    """The highest attempt (or compensation round) ``record`` shows besides its ``attempt``: its owner's, its last
    write's, a step's, a compensation entry's, an instance of this order its history names (the starter's and the
    supervisor's entries name the owner in ``detail``); 0 when it shows none."""
    numbers = [0, *(step.attempt for step in record.steps.values()), *(entry.attempt for entry in record.compensation)]
    named = [record.locked_by, None if record.last_write is None else record.last_write.by]
    # the entries the app keeps (``HISTORY_LIMIT``): a longer list is a hand edit, cut at the record's next write
    named += [text for entry in record.history[-HISTORY_LIMIT:] for text in (entry.by, entry.detail)]
    for text in named:
        if text and len(text) <= MAX_INSTANCE_ID_LENGTH and instance_order_id(text) == record.order_id:
            numbers.append(instance_number(text) or 0)
    return max(numbers)


def last_move_at(record: StateRecord) -> int | None:
    """The index in ``history`` of the record's last move: its last entry that is not a side note
    (``SIDE_NOTES``: written beside whoever moved it last), or None."""
    for index in range(len(record.history) - 1, -1, -1):
        if record.history[index].event not in SIDE_NOTES:
            return index
    return None


def last_move(record: StateRecord) -> HistoryEntry | None:
    """The history entry of the record's last move (``last_move_at``), or None."""
    index = last_move_at(record)
    return None if index is None else record.history[index]
