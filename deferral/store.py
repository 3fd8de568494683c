"""Reading and writing deferral documents (in the ``state`` container, the order's partition).

Every write is conditional: a create that fails if the document appeared meanwhile, or a replace on
``_etag``. ``update_deferrals`` re-reads and re-applies its change when it loses such a race, so two
writers (submission, a RetryDeferred, the peek sweep) never lose each other's entries."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from adapters.cosmos.errors import AlreadyExists, ConcurrencyExhausted, EtagMismatch, mapped_errors
from deferral.records import DeferralDocument, document_id

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy


class DeferralLog(Protocol):
    def get(self, order_id: str) -> DeferralDocument | None: ...

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        """Create (``doc.etag`` None; ``AlreadyExists`` if it exists) or replace on ``doc.etag``
        (``EtagMismatch`` if it changed)."""
        ...


class CosmosDeferralLog:
    def __init__(self, container: ContainerProxy) -> None:
        self._c = container

    def get(self, order_id: str) -> DeferralDocument | None:
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        with mapped_errors():
            try:
                doc = self._c.read_item(document_id(order_id), partition_key=order_id)
            except CosmosResourceNotFoundError:
                return None
        return DeferralDocument.from_document(doc)

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        from azure.core import MatchConditions

        with mapped_errors():
            if doc.etag is None:
                written = self._c.create_item(doc.to_document())
            else:
                written = self._c.replace_item(
                    doc.id, doc.to_document(), etag=doc.etag, match_condition=MatchConditions.IfNotModified
                )
        return DeferralDocument.from_document(written)


def update_deferrals(
    log: DeferralLog,
    order_id: str,
    change: Callable[[DeferralDocument], DeferralDocument],
    now: datetime,
    attempts: int = 5,
) -> DeferralDocument:
    """Read (or start empty), apply ``change``, write conditionally; on a lost race, again."""
    for _ in range(attempts):
        current = log.get(order_id)
        base = current if current is not None else DeferralDocument.empty(order_id, now)
        updated = change(base)
        if current is not None and updated == current:
            return current  # nothing to write
        try:
            return log.save(updated.model_copy(update={"etag": base.etag}))
        except (EtagMismatch, AlreadyExists):
            continue
    raise ConcurrencyExhausted(f"deferral document of order {order_id}: {attempts} races in a row")
