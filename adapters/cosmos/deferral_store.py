"""Reading and writing deferral documents (``domain/deferral.py``; in the ``state`` container, the
order's partition).

Every write is conditional (``adapters/cosmos/documents.py``): ``update_deferrals`` re-reads and
re-applies its change when it loses a race, so two writers (submission, a RetryDeferred, the peek
sweep) never lose each other's entries."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Literal, Protocol

from adapters.cosmos.documents import ConditionalDocuments, update_conditionally
from domain.deferral import DeferralDocument, document_id

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy


class DeferralLog(Protocol):
    def get(self, order_id: str) -> DeferralDocument | None: ...

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        """Create (``doc.version`` None; ``AlreadyExists`` if it exists) or replace on ``doc.version``
        (``EtagMismatch`` if it changed)."""
        ...


class CosmosDeferralLog:
    def __init__(self, container: ContainerProxy) -> None:
        self._c = container
        self._docs = ConditionalDocuments(container, DeferralDocument)

    def get(self, order_id: str) -> DeferralDocument | None:
        return self._docs.get(document_id(order_id), order_id)

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        return self._docs.save(doc)


class Unread(Enum):
    """``update_deferrals`` without ``as_read``: the caller has not read the document."""

    UNREAD = "unread"


def update_deferrals(
    log: DeferralLog,
    order_id: str,
    change: Callable[[DeferralDocument], DeferralDocument],
    now: datetime,
    attempts: int = 5,
    *,
    as_read: DeferralDocument | Literal[Unread.UNREAD] | None = Unread.UNREAD,
) -> DeferralDocument:
    """Read (or start empty), apply ``change``, write conditionally; on a lost race, again. ``as_read``:
    the document as the caller has just read it (None: there was none), taken instead of the first read
    (if it has changed since, the write loses its race and the document is read again)."""
    first: list[DeferralDocument | None] = [] if as_read is Unread.UNREAD else [as_read]

    def read() -> DeferralDocument | None:
        return first.pop() if first else log.get(order_id)

    written, _ = update_conditionally(
        read=read,
        fresh=lambda: DeferralDocument.empty(order_id, now),
        change=lambda base: (change(base), None),
        unchanged=lambda current, _base, updated: current is not None and updated == current,
        save=log.save,
        what=f"deferral document of order {order_id}",
        attempts=attempts,
    )
    return written
