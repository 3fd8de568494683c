"""Where the dead-letter watch (``supervisor/dead_letters.py``) has read each queue's dead-letter subqueue to. Pure.

One small document per queue in the ``state`` container under its own partition (``orderId`` =
``deadletters:<queue>``, no ``processState``: no order query ever returns it), as a dependency's health is kept
(``domain/circuit.py``): written only conditionally (a create that fails if it appeared, a replace on ``_etag``),
so it survives restarts and two runs on two instances never move it back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

DOCUMENT_KIND = "DeadLetterCursor"
SCHEMA_VERSION = 1


def partition_key(queue: str) -> str:
    """The document's ``orderId`` (the container's partition key): never an order id (no ``:`` in one)."""
    return f"deadletters:{queue}"


def document_id(queue: str) -> str:
    return f"deadletters:{queue}"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterCursor:
    """The newest sequence number of ``queue``'s dead-letter subqueue the watch has logged (0: none yet)."""

    id: str
    order_id: str
    kind: str = DOCUMENT_KIND
    queue: str
    last_sequence_number: int = 0
    schema_version: int = SCHEMA_VERSION
    updated_at: datetime
    # As DependencyHealth: the stored version (``_etag``) and the keys this code does not know. Never mapped.
    version: str | None = None
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def fresh(cls, queue: str, now: datetime) -> DeadLetterCursor:
        return cls(id=document_id(queue), order_id=partition_key(queue), queue=queue, updated_at=now)

    def advanced(self, sequence_number: int, now: datetime) -> DeadLetterCursor:
        """Read up to ``sequence_number``: never back (a concurrent run that read further wins)."""
        if sequence_number <= self.last_sequence_number:
            return self
        return replace(self, last_sequence_number=sequence_number, updated_at=now)
