"""Backoff arithmetic shared by agents and the supervisor."""

from __future__ import annotations

import random
from datetime import timedelta

# 2**64 seconds is past any cap a duration setting can hold (``settings.MAX_DURATION``, 100 years: about 2**32 s).
_MAX_DOUBLINGS = 64


def exponential_backoff(failures: int, base: timedelta, cap: timedelta, rng: random.Random | None = None) -> timedelta:
    """``base * 2**(failures-1)`` capped at ``cap``, with "equal jitter": a random value in
    [half, full] of that delay, so competing retries spread out but never retry immediately."""
    if failures < 1:
        return timedelta(0)
    # The doubling stops once it can only be capped (a float cannot hold 2**1024: past 1,025 failures, which
    # a count setting allows, ``2 ** (failures - 1)`` as a float raised OverflowError).
    doublings = min(failures - 1, _MAX_DOUBLINGS)
    full = min(cap.total_seconds(), base.total_seconds() * (2.0**doublings))
    jitter = (rng or random).uniform(0.5, 1.0)
    return timedelta(seconds=full * jitter)
