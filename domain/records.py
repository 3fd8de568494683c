"""The state record: one document per order in the Cosmos DB container ``state``.

Field names are camelCase in the record's JSON form (``to_document``: the stored document and the
operator API's view; ``orderId``, ``lockedBy``, ``completeBy``...), snake_case in Python. ``version``
is an opaque token of the stored version a record was read at: the store (``adapters/cosmos``, where
it is Cosmos' ``_etag``) replaces a record only if it is still that version.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from domain.states import ProcessState, StepStatus
from domain.timefmt import UtcDateTime

SCHEMA_VERSION = 1
HISTORY_LIMIT = 50


class StoredDocument(BaseModel):
    """A part of a document in the ``state`` container: camelCase field names on the wire, snake_case
    in Python, immutable, unknown fields ignored (a newer writer's field never breaks an older reader)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")


class StepState(StoredDocument):
    status: StepStatus
    agent: str
    request_id: str
    attempt: int
    started_at: UtcDateTime
    finished_at: UtcDateTime | None = None
    result: dict[str, Any] | None = None
    error: str | None = None


class CompensationEntry(StoredDocument):
    """One completed, compensable step and what its undo needs (references only, never card data)."""

    seq: int
    step: str
    agent: str
    undo_action: str
    data: dict[str, Any]
    attempt: int
    at: UtcDateTime
    outcome: str | None = None  # None (not undone yet) | "Undone" | "Failed"
    outcome_at: UtcDateTime | None = None
    error: str | None = None


class HistoryEntry(StoredDocument):
    at: UtcDateTime
    event: str
    by: str
    detail: str = ""


class PaymentReceived(StoredDocument):
    """A prepaid order's ``PaymentNotification``, as applied to its state record (references only)."""

    notification_id: str
    amount_cents: int
    currency: str
    provider_reference: str
    received_at: UtcDateTime
    sequence_number: int | None = None  # of the orders-queue message that carried it


class StateRecord(StoredDocument):
    id: str
    order_id: str
    process_state: ProcessState
    locked_by: str | None = None
    complete_by: UtcDateTime | None = None
    failure_count: int = 0
    attempt: int = 0
    reply_to: str | None = None
    current_step: str | None = None
    steps: dict[str, StepState] = Field(default_factory=dict)
    compensation: list[CompensationEntry] = Field(default_factory=list)
    last_error: str | None = None
    payment: PaymentReceived | None = None  # prepaid orders: the provider's notification, once applied
    # Since when the order has been waiting out an open dependency without spending its retry budget
    # (supervisor/outage.py); cleared when a step succeeds.
    outage_wait_since: UtcDateTime | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    updated_at: UtcDateTime
    # The stored version this was read at, opaque (None: never stored); the store writes only over
    # that version (adapters/cosmos: the item's ``_etag``). Never part of the document.
    version: str | None = Field(default=None, exclude=True)

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> StateRecord:
        return cls.model_validate(doc)

    def to_document(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude={"version"})

    def with_changes(self, now: datetime, event: str, by: str, detail: str = "", **changes: Any) -> StateRecord:
        """A copy with ``changes`` applied, ``updatedAt`` set and the change noted in ``history``."""
        entry = HistoryEntry(at=now, event=event, by=by, detail=detail)
        history = [*self.history, entry][-HISTORY_LIMIT:]
        return self.model_copy(update={**changes, "updated_at": now, "history": history})
