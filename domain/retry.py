"""Backoff arithmetic shared by agents, the supervisor and compensation rounds."""

from __future__ import annotations

import random
from datetime import timedelta

# 2**64 seconds is past any cap a duration setting can hold (``settings.MAX_DURATION``, 100 years: about 2**32 s).
_MAX_DOUBLINGS = 64


def doubled_seconds(failures: int, base_seconds: float, cap_seconds: float) -> float:
    """``base_seconds * 2**(failures-1)`` capped at ``cap_seconds`` (``failures`` >= 1), without jitter: what a
    compensation round waits between two tries of an undo (``orchestrators/compensation.py``)."""
    # The doubling stops once it can only be capped (a float cannot hold 2**1024: past 1,025 failures, which
    # a count setting allows, ``2 ** (failures - 1)`` as a float raised OverflowError).
    doublings = min(failures - 1, _MAX_DOUBLINGS)
    return min(cap_seconds, base_seconds * (2.0**doublings))


def exponential_backoff(failures: int, base: timedelta, cap: timedelta, rng: random.Random | None = None) -> timedelta:
    """``base * 2**(failures-1)`` capped at ``cap``, with "equal jitter": a random value in
    [half, full] of that delay, so competing retries spread out but never retry immediately."""
    if failures < 1:
        return timedelta(0)
    full = doubled_seconds(failures, base.total_seconds(), cap.total_seconds())
    jitter = (rng or random).uniform(0.5, 1.0)
    return timedelta(seconds=full * jitter)
