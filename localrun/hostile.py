"""Faults of issue 11 (part B) the runner injects: submitters' status queues that refuse sends,
Service Bus handlers that outlive their message lock, and the app setting admission control reads.

- ``status_queues.refusing``: a submitter's status queue refuses every send in a window (the
  broker's ``SendRefusal``: queue full, deleted, or the app's role removed).
- ``servicebus.lock_expiry_rate``: a Service Bus-triggered invocation, once its blocking work is
  done and before it settles, stalls past its message's lock (lock duration + 5 to 30 s, as a long
  GC pause or a starved thread would), and the host's renewal of that lock fails in the stall (the
  host applies ``maxAutoLockRenewalDuration``, ``localrun.host.LockRenewals``; a stalled host, or a
  renewal that cannot reach Service Bus, does not renew), so the lock runs out and the broker delivers
  the message to a second handler while the first one is still running; the first then settles a lock
  it no longer holds.
- ``admission.max_pending``, ``admission.max_in_flight``: the ``MAX_PENDING`` and ``MAX_IN_FLIGHT``
  app settings of the run (a small in-flight cap keeps orders Pending, so admission control rejects).
- ``host.restart_every_s``: host restarts a mean of that many seconds apart, each gap drawn from
  half to one and a half times it (``RestartGaps``). Exactly periodic restarts with a period that
  divides the 60 s lock would meet a redelivered message at the same phase on each of its five
  deliveries; a real host's restarts (scale-in, deployments, platform upgrades) are irregular.
- ``cosmos.latency_ms``: every Cosmos DB operation of the app takes a uniform time in that range, so
  handlers running at once interleave between their Cosmos calls (without it a handler runs from
  its first to its last Cosmos call without yielding, and no race between two handlers can show).
- ``durable.delivery_delay_rate``, ``delivery_delay_ms``: the Durable backend's messages and activity work
  items reach their worker late (``delivery_delays``, ``DurableEngine.delivery_delay``).
- ``durable.outages``: in each window the Durable extension's HTTP API answers every client call with a 500 and the
  error object ``HttpApiHandler`` answers when its storage fails, or none (a window's ``bare``: the host's own 500)
  (``DurableOutages``, at the runner's HTTP edge below the SDK's client: a raise fails, a status read comes back
  empty); orchestrations, activities and timers go on.
- ``durable.late_start_rate``, ``late_start_ms``: a start the backend takes but records late: answered a 500, its
  instance unknown (404) for a uniform delay in that range, then it starts (``late_starts``,
  ``DurableEngine.late_start``)."""

from __future__ import annotations

import contextvars
import random
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from contracts.names import QUEUE_LOCK_DURATION_SECONDS
from localrun.durable.extension_api.handlers import Answer, empty, json_answer
from localrun.profile import Profile
from localrun.servicebus import InProcessBroker
from localrun.servicebus.faults import SendRefusal

# Set by the host for an invocation that must stall after its blocking work (localrun.worker.executor).
stall_after_work: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "localrun_stall_after_work", default=None
)


def app_settings(profile: Profile) -> dict[str, str]:
    """The app settings a profile overrides."""
    settings = {"MAX_PENDING": profile.max_pending, "MAX_IN_FLIGHT": profile.max_in_flight}
    return {**{name: str(value) for name, value in settings.items() if value is not None}, **profile.settings}


def refuse_status_queues(broker: InProcessBroker, submitters: list[str], profile: Profile, start: datetime) -> None:
    for refusal in profile.status_queues.refusing:
        end = start + timedelta(seconds=refusal.start_s + refusal.duration_s) if refusal.duration_s else None
        broker.refuse_sends(
            submitters[refusal.submitter - 1],
            SendRefusal(refusal.error, start + timedelta(seconds=refusal.start_s), end),  # type: ignore[arg-type]
        )


class LockStalls:
    """Draws, per Service Bus invocation, whether it stalls past its lock (seeded, deterministic). The host
    stops renewing the lock of an invocation that stalls (``localrun.host._stalling``)."""

    def __init__(
        self,
        rate: float,
        rng: random.Random,
        sleep: Callable[[float], None],
        settle_latency_ms: tuple[float, float] | None = None,
    ) -> None:
        self._rate = rate
        self._rng = rng
        self._sleep = sleep
        self._latency = settle_latency_ms
        self.injected = 0

    def plan(self) -> tuple[Callable[[], None] | None, Callable[[], None] | None]:
        """What this invocation meets: a stall after its first piece of blocking work (past its lock), or a
        settlement that takes a round trip (``settlement_server.settle_round_trip``: in the thread that settles)."""
        if self._rate <= 0 or self._rng.random() >= self._rate:
            if self._latency is None:
                return None, None
            # profile servicebus.settle_latency_ms: the settlement call waits for Service Bus's answer
            # (the message is still locked, not yet settled)
            latency = self._rng.uniform(*self._latency) / 1000
            return None, _once(lambda: self._sleep(latency))
        seconds = QUEUE_LOCK_DURATION_SECONDS + self._rng.uniform(5, 30)
        used = [False]

        def stall() -> None:
            if not used[0]:  # once per invocation: after its first piece of blocking work
                used[0] = True
                self.injected += 1
                self._sleep(seconds)

        return stall, None


def _once(action: Callable[[], None]) -> Callable[[], None]:
    done = [False]

    def run() -> None:
        if not done[0]:
            done[0] = True
            action()

    return run


class CosmosLatency:
    def __init__(self, bounds_ms: tuple[float, float], rng: random.Random, sleep: Callable[[float], None]) -> None:
        self._lo, self._hi = bounds_ms
        self._rng = rng
        self._sleep = sleep

    def __call__(self) -> None:
        self._sleep(self._rng.uniform(self._lo, self._hi) / 1000)


class RestartGaps:
    """When the next host restart comes: a mean of ``every_s`` apart, each gap uniform in
    [0.5, 1.5] x ``every_s`` from its own seeded generator (other fault streams are unchanged)."""

    def __init__(self, every_s: float | None, rng: random.Random) -> None:
        self._every_s = every_s
        self._rng = rng

    def next_after(self, now: datetime) -> datetime | None:
        if not self._every_s:
            return None
        return now + timedelta(seconds=self._every_s * self._rng.uniform(0.5, 1.5))


def last_try_crashes(data: object, rng: random.Random, rate: float) -> bool:
    """``host.last_try_crash_rate``: whether an activity execution whose input ``data`` says ``lastTry`` (a final
    status's, an alert courier's last try) fails before its code runs, its worker process gone under it. Draws only
    for such inputs, so the other activities' runs are unchanged."""
    return isinstance(data, dict) and data.get("lastTry") is True and rng.random() < rate


def delivery_delays(rate: float, bounds_ms: tuple[float, float], rng: random.Random) -> Callable[[], timedelta]:
    """``DurableEngine.delivery_delay``: at ``rate``, a uniform delay in ``bounds_ms``; else none."""
    lo, hi = bounds_ms

    def draw() -> timedelta:
        if rng.random() >= rate:
            return timedelta(0)
        return timedelta(milliseconds=rng.uniform(lo, hi))

    return draw


def late_starts(rate: float, bounds_ms: tuple[float, float], seed: str) -> Callable[[str], timedelta]:
    """``DurableEngine.late_start``: for ``rate`` of the instance ids, a uniform delay in ``bounds_ms``; else none.
    Drawn from the instance id and ``seed``, so the starts' threads' order does not decide which are late."""
    lo, hi = bounds_ms

    def draw(instance_id: str) -> timedelta:
        rng = random.Random(f"{seed}:{instance_id}")
        if rng.random() >= rate:
            return timedelta(0)
        return timedelta(milliseconds=rng.uniform(lo, hi))

    return draw


# What the extension's HttpApiHandler answers an exception from its storage with (a 500 and the error object)
STORAGE_FAILED = {
    "Message": "Something went wrong while processing your request",
    "ExceptionMessage": "The remote server returned an error: (503) Server Unavailable.",
    "ExceptionType": "Azure.RequestFailedException",
    "StackTrace": None,
}


class DurableOutages:
    """``DurableExtensionApi.before_answer`` for ``durable.outages``: a 500 for every client call made inside one of
    ``windows`` (seconds from ``start``, on ``clock``), the extension's own answer to an exception from its storage
    (its error object); inside one of ``bare`` (the windows given ``"bare": true``), a 500 with no body, as the
    Functions host answers a failure in front of the extension; counted in ``counts["durable_calls_failed"]``."""

    def __init__(
        self,
        windows: tuple[tuple[float, float], ...],
        clock: Callable[[], datetime],
        start: datetime,
        counts: Counter[str],
        bare: tuple[tuple[float, float], ...] = (),
    ) -> None:
        def spans(given: tuple[tuple[float, float], ...]) -> list[tuple[datetime, datetime]]:
            return [(start + timedelta(seconds=s), start + timedelta(seconds=s + d)) for s, d in given]

        self._windows = spans(windows)
        self._bare = spans(bare)
        self._clock = clock
        self._counts = counts

    def __call__(self, method: str, path: str) -> Answer | None:
        now = self._clock()
        if any(begin <= now < end for begin, end in self._bare):
            self._counts["durable_calls_failed"] += 1
            return empty(500)
        if not any(begin <= now < end for begin, end in self._windows):
            return None
        self._counts["durable_calls_failed"] += 1
        return json_answer(500, STORAGE_FAILED)
