"""Browsing a queue from its newest end.

Peek enumerates a queue oldest first, from a sequence number on (``DeferredReceiver.peek``); nothing
says where the newest message is. On a queue that is not partitioned, sequence numbers grow in the
order messages are enqueued, with gaps where messages were removed, so "some message has a sequence
number of ``s`` or more" (one peek of one message from ``s``) is true up to the newest message's number
and false after it (a partitioned queue puts its partition in a number's top bits: not for one).
``last_sequence_number`` finds that number by galloping from a message known to be
on the queue (steps 1, 2, 4, ...) until a peek finds nothing, then bisecting between the two: about
``2 * log2(d)`` one-message peeks, ``d`` being how far the newest message's number is from where the
search starts (the oldest message's, or a hint), and never more than 128 whatever the queue holds.
``peek_newest`` then peeks the newest ``window`` sequence numbers.

A ``TailHint`` (what the previous search found, kept by the caller) is where the next search starts: a
queue that gained ``k`` messages since costs about ``2 * log2(k) + 2`` peeks, one that gained none two.
Any hint is safe: one past the newest message (the queue was emptied, or another queue's) only costs a
search from the oldest message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

# Sequence numbers are 64-bit signed integers: no message is numbered beyond this.
MAX_SEQUENCE_NUMBER = 2**63 - 1


class Peeker(Protocol):
    """What browsing needs of a receiver: ``DeferredReceiver.peek`` (see there for its semantics)."""

    def peek(self, max_count: int, from_sequence_number: int = 0) -> list[Any]: ...


@dataclass
class TailHint:
    """The newest message's sequence number a search last found (0: none yet). Kept in process memory by
    whoever browses one queue repeatedly; a stale value only costs peeks."""

    sequence_number: int = 0


def _first_from(receiver: Peeker, sequence_number: int) -> int | None:
    """The sequence number of the first message numbered ``sequence_number`` or more, None if none is."""
    found = receiver.peek(1, sequence_number)
    return int(found[0].sequence_number) if found else None


def last_sequence_number(receiver: Peeker, hint: int = 0) -> int | None:
    """The newest message's sequence number (None: the queue is empty). Starts from ``hint`` when a
    message is numbered ``hint`` or more, else from the oldest message. A message that arrives meanwhile
    may or may not be found; the number returned is always one a message had during the search."""
    found = _first_from(receiver, hint) if hint > 0 else None
    beyond: int | None = None  # a number at or after which no message was found
    if found is None:
        if hint > 0:
            beyond = hint
        found = _first_from(receiver, 0)
        if found is None:
            return None
    step = 1
    while beyond is None:  # gallop: at most 64 doublings fit in the 63-bit space
        probe = found + step
        if probe > MAX_SEQUENCE_NUMBER:
            beyond = MAX_SEQUENCE_NUMBER + 1
            break
        later = _first_from(receiver, probe)
        if later is None:
            beyond = probe
        else:
            found, step = later, step * 2
    while beyond - found > 1:  # bisect: found has a message, nothing is at or after beyond
        middle = (found + beyond) // 2
        later = _first_from(receiver, middle)
        if later is None:
            beyond = middle
        else:
            found = later
    return found


def peek_range(receiver: Peeker, first: int, last: int) -> list[Any]:
    """The messages numbered ``first`` to ``last``, oldest first: one peek when the service returns all it
    is asked for, one more for each short answer (at most one per number in the range)."""
    found: list[Any] = []
    start = first
    while start <= last:
        batch = receiver.peek(last - start + 1, start)
        kept = [m for m in batch if int(m.sequence_number) <= last]
        found.extend(kept)
        if not batch or len(kept) < len(batch):
            break
        start = int(batch[-1].sequence_number) + 1
    return found


def peek_newest(receiver: Peeker, window: int, hint: TailHint | None = None) -> list[Any]:
    """The messages among the newest ``window`` sequence numbers of the queue, oldest first (as many as
    are on it: fewer where messages were removed). ``hint`` is read and updated."""
    last = last_sequence_number(receiver, hint.sequence_number if hint is not None else 0)
    if hint is not None:
        hint.sequence_number = last or 0
    if last is None:
        return []
    return peek_range(receiver, max(1, last - window + 1), last)
