"""Backoff arithmetic shared by agents and the supervisor."""

from __future__ import annotations

import random
from datetime import timedelta


def exponential_backoff(failures: int, base: timedelta, cap: timedelta, rng: random.Random | None = None) -> timedelta:
    """``base * 2**(failures-1)`` capped at ``cap``, with "equal jitter": a random value in
    [half, full] of that delay, so competing retries spread out but never retry immediately."""
    if failures < 1:
        return timedelta(0)
    full = min(cap.total_seconds(), base.total_seconds() * (2 ** (failures - 1)))
    jitter = (rng or random).uniform(0.5, 1.0)
    return timedelta(seconds=full * jitter)
