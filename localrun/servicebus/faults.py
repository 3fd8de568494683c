"""Send-failure injection for the broker, driven by a seeded random generator (deterministic)."""

from __future__ import annotations

import random
from dataclasses import dataclass


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
