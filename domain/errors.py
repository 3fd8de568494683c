"""Domain errors."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base of the domain's errors."""


class IllegalTransition(DomainError):
    """The record is not in a state that allows the requested move."""


class FencingLost(DomainError):
    """The caller no longer owns the record (``lockedBy`` is someone else's, or null)."""

    def __init__(self, order_id: str, expected: str | None, actual: str | None) -> None:
        super().__init__(f"order {order_id}: lockedBy is {actual!r}, caller is {expected!r}")
        self.order_id = order_id
        self.expected = expected
        self.actual = actual


class StaleWrite(FencingLost):
    """The caller still owns the record, but this write is older than one it already made: a late
    second execution of an activity whose orchestration has moved on (``domain.write_order``)."""

    def __init__(self, order_id: str, owner: str, number: int, last: int) -> None:
        DomainError.__init__(
            self, f"order {order_id}: write #{number} of {owner!r} comes after its write #{last}: a late duplicate"
        )
        self.order_id = order_id
        self.expected = owner
        self.actual = owner
        self.number = number
        self.last = last


class WriteAlreadyMade(DomainError):
    """The caller's write is on the record already: the owner's newest write has its number
    (``domain.write_order``). ``record`` is the record as found; nothing is written again."""

    def __init__(self, record: Any, number: int) -> None:
        super().__init__(f"order {record.order_id}: write #{number} of {record.locked_by!r} is made already")
        self.record = record
        self.number = number
