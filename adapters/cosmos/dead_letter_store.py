"""The dead-letter watch's cursors (``domain/dead_letters.py``): one document per queue in the ``state`` container,
read and written conditionally (``adapters/cosmos/documents.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from adapters.cosmos.documents import ConditionalDocuments
from domain.dead_letters import DeadLetterCursor, document_id, partition_key

if TYPE_CHECKING:
    from azure.cosmos import ContainerProxy


class DeadLetterCursors(Protocol):
    def get(self, queue: str) -> DeadLetterCursor | None: ...

    def save(self, doc: DeadLetterCursor) -> DeadLetterCursor:
        """Create (``doc.version`` None; ``AlreadyExists`` if it exists) or replace on ``doc.version``
        (``EtagMismatch`` if it changed)."""
        ...


class CosmosDeadLetterCursors:
    def __init__(self, container: ContainerProxy) -> None:
        self._docs = ConditionalDocuments(container, DeadLetterCursor)

    def get(self, queue: str) -> DeadLetterCursor | None:
        return self._docs.get(document_id(queue), partition_key(queue))

    def save(self, doc: DeadLetterCursor) -> DeadLetterCursor:
        return self._docs.save(doc)
