"""The order of one owner's fenced writes.

Durable Functions runs an activity at least once: a worker that dies after its result reached the
orchestration, before it let go of the work item, leaves the item to run again later, when the
orchestration has moved on. Fencing by ``lockedBy`` cannot refuse such a run: its instance still
owns the record. So every orchestration numbers its fenced writes (1, 2, 3... in the order it makes
them, the same on every replay: ``orchestrators.fenced``), and the record keeps the owner's newest
number (``lastWrite``). A write older than that is a late duplicate and is refused (``StaleWrite``):
run again after the next step began, it would put a finished step back in flight, move
``completeBy`` back, or point the compensation log at a provider that did not charge. The same number
again is the same write again (a retry after a lost response, a late run of the newest write): it
is on the record already and is not made twice (``WriteAlreadyMade``: answered with the record as it
is). Made again, it would overwrite what others wrote since: an operator's review answer, noted after
``await_review``, was taken back by a late second run of it. An unnumbered write (an activity
scheduled by code from before this rule) is not judged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from domain.errors import StaleWrite, WriteAlreadyMade
from domain.records import LastWrite, StateRecord


def in_write_order(
    record: StateRecord, owner: str, number: int | None, change: Callable[[StateRecord], StateRecord]
) -> StateRecord:
    """``change(record)``, noted as ``owner``'s write ``number``; ``StaleWrite`` if ``owner`` already
    wrote a later one, ``WriteAlreadyMade`` if this one. ``number`` None: ``change`` as it is."""
    if number is None:
        return change(record)
    last = record.last_write
    if last is not None and last.by == owner:
        if number < last.number:
            raise StaleWrite(record.order_id, owner, number, last.number)
        if number == last.number:
            raise WriteAlreadyMade(record, number)
    return replace(change(record), last_write=LastWrite(by=owner, number=number))
