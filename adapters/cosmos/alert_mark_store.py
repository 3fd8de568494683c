"""The operator-alert problems that paged (``domain/alert_marks.py``): one document per problem in the ``state``
container, read and written conditionally (``adapters/cosmos/documents.py``).

A mark that does not map (a hand edit, a later release's shape read after a rollback) is read as a mark long over
(``AlertMark.unreadable``) with its stored version: its problem's next occurrence pages, as when a mark cannot be
read at all, and the mark written after that send replaces it on its etag. A ``DocumentError`` out of ``get``
failed the raiser instead (a conflicting submission abandoned, never alerted; a supervisor phase failing each
run), for as long as the mark stayed, and no ops view lists marks.

A mark expires (its ``ttl``, ``domain.alert_marks.EXPIRE_AFTER`` after its last write): one gone between its read
and the replace written on it (expired that moment, or deleted by hand) is an ``EtagMismatch``, a race lost as to
any other writer: a 404 without a substatus, as ``get`` reads one (a 404/1003, no such container, stays the
SDK's). Its 404 left the SDK's error out of the raiser, which catches store errors only: the alert sent, the
supervisor phase or the intake failed after it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from adapters.cosmos.documents import ConditionalDocuments, stored
from adapters.cosmos.errors import EtagMismatch, read_or_none
from adapters.cosmos.mapping import DocumentError
from domain.alert_marks import AlertMark, document_id

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy

log = logging.getLogger(__name__)


class AlertMarks(Protocol):
    def get(self, key: str) -> AlertMark | None: ...

    def save(self, doc: AlertMark) -> AlertMark:
        """Create (``doc.version`` None; ``AlreadyExists`` if it exists) or replace on ``doc.version``
        (``EtagMismatch`` if it changed)."""
        ...


class CosmosAlertMarks:
    def __init__(self, container: ContainerProxy) -> None:
        self._c = container
        self._docs = ConditionalDocuments(container, AlertMark)

    def get(self, key: str) -> AlertMark | None:
        doc = document_id(key)
        item = read_or_none(self._c, doc, doc)
        if item is None:
            return None
        try:
            return stored(AlertMark, item)
        except DocumentError as exc:
            log.warning("alert mark %s does not map (%s): read as over, its problem pages", doc, exc)
            return AlertMark.unreadable(key, item.get("_etag"))

    def save(self, doc: AlertMark) -> AlertMark:
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        try:
            return self._docs.save(doc)
        except CosmosResourceNotFoundError as exc:  # a plain 404 (mapped_errors leaves it): gone since it was read
            if exc.sub_status:  # not that answer (as read_or_none): 1003, its container or database does not exist
                raise
            raise EtagMismatch(f"alert mark {doc.id} is gone since it was read (expired): {exc.message}") from exc
