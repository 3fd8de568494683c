"""How a simulated service misbehaves: latency, error rates and outage windows (a fault profile)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class Outage:
    """A window, relative to the simulator's origin time, in which every call fails transiently."""

    start: timedelta
    duration: timedelta

    def covers(self, origin: datetime, moment: datetime) -> bool:
        begins = origin + self.start
        return begins <= moment < begins + self.duration


@dataclass(frozen=True)
class SimulatorConfig:
    """``latency_ms``: each call takes a uniform random time in this range (spent on the clock).
    ``transient_error_rate`` / ``permanent_error_rate``: chance that a new call fails that way.
    ``response_loss_rate``: chance that a call takes effect but its answer is lost (a transient
    error after the side effect: the retry with the same idempotency key must not repeat it).
    ``outages``: windows relative to ``origin`` (None: the first call's time).
    ``slow_call_rate`` / ``slow_latency_ms``: chance that a call takes a time from the slow tail
    instead (e.g. several times the step deadline: the call is still in flight after its undo)."""

    latency_ms: tuple[float, float] = (0.0, 0.0)
    transient_error_rate: float = 0.0
    permanent_error_rate: float = 0.0
    response_loss_rate: float = 0.0
    outages: tuple[Outage, ...] = ()
    origin: datetime | None = None
    slow_call_rate: float = 0.0
    slow_latency_ms: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        for name in ("latency_ms", "slow_latency_ms"):
            low, high = getattr(self, name)
            if low < 0 or high < low:
                raise ValueError(f"{name} must be [lo, hi] with 0 <= lo <= hi, got {list(getattr(self, name))}")
        for name in ("transient_error_rate", "permanent_error_rate", "response_loss_rate", "slow_call_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {rate}")
        if self.transient_error_rate + self.permanent_error_rate > 1.0:
            raise ValueError("transient_error_rate + permanent_error_rate must not exceed 1")
        for outage in self.outages:
            if outage.duration < timedelta(0) or outage.start < timedelta(0):
                raise ValueError("outage start_s and duration_s must not be negative")

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any], origin: datetime | None = None) -> SimulatorConfig:
        """From a fault profile entry: ``{"latency_ms": [lo, hi], "transient_error_rate": 0.1,
        "permanent_error_rate": 0.0, "response_loss_rate": 0.0, "outages": [{"start_s": 30,
        "duration_s": 20}]}``; every key is optional. Unknown keys are an error (a typo must not
        silently turn a fault off)."""
        known = {
            "latency_ms",
            "transient_error_rate",
            "permanent_error_rate",
            "response_loss_rate",
            "outages",
            "slow_call_rate",
            "slow_latency_ms",
        }
        unknown = set(profile) - known
        if unknown:
            raise ValueError(f"unknown simulator setting(s) {sorted(unknown)}; known: {sorted(known)}")
        latency = profile.get("latency_ms", (0, 0))
        slow = profile.get("slow_latency_ms", (0, 0))
        for name, pair in (("latency_ms", latency), ("slow_latency_ms", slow)):
            if len(pair) != 2:
                raise ValueError(f"{name} must be [lo, hi], got {pair!r}")
        outages = tuple(
            Outage(timedelta(seconds=float(o["start_s"])), timedelta(seconds=float(o["duration_s"])))
            for o in profile.get("outages", ())
        )
        return cls(
            latency_ms=(float(latency[0]), float(latency[1])),
            transient_error_rate=float(profile.get("transient_error_rate", 0.0)),
            permanent_error_rate=float(profile.get("permanent_error_rate", 0.0)),
            response_loss_rate=float(profile.get("response_loss_rate", 0.0)),
            outages=outages,
            origin=origin,
            slow_call_rate=float(profile.get("slow_call_rate", 0.0)),
            slow_latency_ms=(float(slow[0]), float(slow[1])),
        )
