"""A queue's policy: the entity properties the broker enforces (Bicep declares the same values)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from contracts.names import (
    QUEUE_DUPLICATE_DETECTION_MINUTES,
    QUEUE_LOCK_DURATION_SECONDS,
    QUEUE_MAX_DELIVERY_COUNT,
)


@dataclass(frozen=True)
class QueuePolicy:
    """What a queue is declared with.

    ``duplicate_detection_window`` None turns duplicate detection off. ``default_ttl`` None means
    messages never expire (the service's default is ``TimeSpan.MaxValue``)."""

    lock_duration: timedelta = field(default_factory=lambda: timedelta(seconds=QUEUE_LOCK_DURATION_SECONDS))
    max_delivery_count: int = QUEUE_MAX_DELIVERY_COUNT
    duplicate_detection_window: timedelta | None = field(
        default_factory=lambda: timedelta(minutes=QUEUE_DUPLICATE_DETECTION_MINUTES)
    )
    default_ttl: timedelta | None = None
    dead_letter_on_expiration: bool = True

    def __post_init__(self) -> None:
        if self.lock_duration <= timedelta(0):
            raise ValueError("lock_duration must be positive")
        if self.max_delivery_count < 1:
            raise ValueError("max_delivery_count must be at least 1")
        if self.default_ttl is not None and self.default_ttl <= timedelta(0):
            raise ValueError("default_ttl must be positive (or None for no expiry)")
