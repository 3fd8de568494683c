"""The operator-alert problems that paged (``domain/alert_marks.py``): one document per problem in the ``state``
container, read and written conditionally (``adapters/cosmos/documents.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from adapters.cosmos.documents import ConditionalDocuments
from domain.alert_marks import AlertMark, document_id

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy


class AlertMarks(Protocol):
    def get(self, key: str) -> AlertMark | None: ...

    def save(self, doc: AlertMark) -> AlertMark:
        """Create (``doc.version`` None; ``AlreadyExists`` if it exists) or replace on ``doc.version``
        (``EtagMismatch`` if it changed)."""
        ...


class CosmosAlertMarks:
    def __init__(self, container: ContainerProxy) -> None:
        self._docs = ConditionalDocuments(container, AlertMark)

    def get(self, key: str) -> AlertMark | None:
        doc = document_id(key)
        return self._docs.get(doc, doc)

    def save(self, doc: AlertMark) -> AlertMark:
        return self._docs.save(doc)
