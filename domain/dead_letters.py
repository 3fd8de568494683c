"""Which dead letters the dead-letter watch (``supervisor/dead_letters.py``) has logged, per queue. Pure.

Not a cursor: a dead-lettered message keeps the sequence number it had on its queue, so one dead-lettered late (a
message the broker gave up on after its last delivery, a deferred one that expired) may be numbered below those
logged before it. What is kept is the set of sequence numbers waiting in the subqueue when the watch last read it
(as ranges): a message waiting now and not in it is new.

One small document per queue in the ``state`` container under its own partition (``orderId`` =
``deadletters:<queue>``, no ``processState``: no order query ever returns it), as a dependency's health is kept
(``domain/circuit.py``): written only conditionally (a create that fails if it appeared, a replace on ``_etag``),
so it survives restarts; a run that loses a race reads it again and writes its own view."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


@dataclass(frozen=True, slots=True)
class SeenRange:
    """Sequence numbers ``first`` to ``last``, both included."""

    first: int
    last: int


def ranges_of(numbers: Iterable[int]) -> list[SeenRange]:
    """``numbers`` as the fewest ranges, in order."""
    ranges: list[SeenRange] = []
    for n in sorted(set(numbers)):
        if ranges and ranges[-1].last == n - 1:
            ranges[-1] = SeenRange(ranges[-1].first, n)
        else:
            ranges.append(SeenRange(n, n))
    return ranges


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterCursor:
    """The sequence numbers of ``queue``'s dead-letter subqueue the watch has logged and saw still waiting."""

    id: str
    order_id: str
    kind: str = DOCUMENT_KIND
    queue: str
    seen: list[SeenRange] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    updated_at: datetime
    # As DependencyHealth: the stored version (``_etag``) and the keys this code does not know. Never mapped.
    version: str | None = None
    unknown_keys: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def fresh(cls, queue: str, now: datetime) -> DeadLetterCursor:
        return cls(id=document_id(queue), order_id=partition_key(queue), queue=queue, updated_at=now)

    def has_seen(self, sequence_number: int) -> bool:
        return any(r.first <= sequence_number <= r.last for r in self.seen)

    def new_of(self, waiting: Iterable[int]) -> list[int]:
        """The numbers of ``waiting`` not logged before, in order."""
        return sorted(n for n in set(waiting) if not self.has_seen(n))

    def seeing(self, waiting: Iterable[int], read_up_to: int | None, now: datetime) -> DeadLetterCursor:
        """Seen: what waits now (``waiting``, read up to sequence number ``read_up_to``; None: the whole subqueue).
        Numbers beyond a partial read stay seen as before; those gone from the subqueue are forgotten."""
        kept = set(waiting)
        if read_up_to is not None:
            kept |= {n for r in self.seen for n in range(max(r.first, read_up_to + 1), r.last + 1)}
        seen = ranges_of(kept)
        return self if seen == self.seen else replace(self, seen=seen, updated_at=now)
