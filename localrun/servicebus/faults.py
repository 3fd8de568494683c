"""Send-failure injection for the broker, driven by a seeded random generator (deterministic)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from adapters.servicebus.sender import QueueNotFound, SendError


@dataclass
class SendFaults:
    """Each send fails with probability ``failure_rate`` (raising ``SendError``). Of the failed sends,
    a share ``stored_anyway_rate`` was in fact stored by the broker before the failure reached the
    sender (a lost acknowledgement): the case duplicate detection exists for."""

    failure_rate: float
    rng: random.Random
    stored_anyway_rate: float = 0.0

    def __post_init__(self) -> None:
        for name in ("failure_rate", "stored_anyway_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")

    def draw(self) -> tuple[bool, bool]:
        """(fails, stored anyway). Draws from the generator only when a rate is non-zero."""
        if self.failure_rate <= 0.0 or self.rng.random() >= self.failure_rate:
            return False, False
        stored = self.stored_anyway_rate > 0.0 and self.rng.random() < self.stored_anyway_rate
        return True, stored


RefusalKind = Literal["quota_exceeded", "not_found", "unauthorized"]
REFUSAL_KINDS: tuple[RefusalKind, ...] = ("quota_exceeded", "not_found", "unauthorized")


@dataclass(frozen=True)
class SendRefusal:
    """A queue refuses every send from ``start`` until ``end`` (None: to the end of the run), as the
    service does when the entity is full (``ServiceBusQuotaExceededError``: transient, the sender may
    retry later), deleted (``MessagingEntityNotFoundError``) or the sender lost its role
    (``ServiceBusAuthorizationError``). What the app's ``SdkMessageSender`` turns those into is what
    the broker raises: ``SendError`` for a full queue, ``QueueNotFound`` for the other two."""

    kind: RefusalKind
    start: datetime
    end: datetime | None = None

    def active(self, now: datetime) -> bool:
        return self.start <= now and (self.end is None or now < self.end)

    def error(self, queue: str) -> SendError:
        if self.kind == "quota_exceeded":
            return SendError(
                f"send to {queue!r} failed: QuotaExceeded: the maximum entity size has been reached (injected)"
            )
        if self.kind == "not_found":
            return QueueNotFound(f"cannot send to queue {queue!r}: MessagingEntityNotFound (injected)")
        return QueueNotFound(f"cannot send to queue {queue!r}: Unauthorized: 'Send' claim required (injected)")
