"""Per-host clock skew (profile ``host.clock_skew_s``).

In Azure every instance of the function app reads its own clock, and those clocks drift apart by
seconds (tens of seconds on a badly synchronised machine). The runner models three hosts: the
supervisor's timer, the agents (the functions that call remote services and compare the time with a
step's deadline) and every other function of the app. Each invocation runs on the host of its
function and reads ``true time + that host's offset`` from the app's clock.

What keeps the true time: the Durable extension (an orchestration's ``current_utc_datetime`` comes
from its history), Cosmos DB, Service Bus, the remote services and the runner's own evidence (the
audit's transition times, the ledger)."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from localrun.virtual_time import SimClock, Task, TaskScheduler

if TYPE_CHECKING:
    from localrun.audit import Audit
    from localrun.host import HostedFunction

SUPERVISOR_FUNCTIONS = frozenset({"supervisor"})
NOT_AN_AGENT = frozenset({"agent_reply_relay"})  # relays replies; it calls no remote service


def host_of(function_name: str) -> str:
    """The simulated host a function runs on (``localrun.profile.CLOCK_HOSTS``)."""
    if function_name in SUPERVISOR_FUNCTIONS:
        return "supervisor"
    if function_name.startswith("agent_") and function_name not in NOT_AN_AGENT:
        return "agents"
    return "app"


def skew_of(offsets_s: Mapping[str, float], host: str) -> timedelta:
    """The offset of ``host``'s clock (``localrun.profile.CLOCK_HOSTS``) under the profile's ``host.clock_skew_s``."""
    return timedelta(seconds=offsets_s.get(host, 0))


class SkewedClocks:
    """The app's ``Clock``: the true simulated time plus the offset of the host whose invocation is
    reading it. ``on_invoke`` is the host's hook, called on the invocation's task before it runs."""

    def __init__(self, clock: SimClock, scheduler: TaskScheduler, offsets_s: Mapping[str, float], audit: Audit) -> None:
        self._clock = clock
        self._scheduler = scheduler
        self._offsets = {host: timedelta(seconds=s) for host, s in offsets_s.items()}
        self._audit = audit
        self._host_of_task: weakref.WeakKeyDictionary[Task, timedelta] = weakref.WeakKeyDictionary()

    def on_invoke(self, function: HostedFunction) -> None:
        task = self._scheduler.current()
        offset = self._offsets.get(host_of(function.name), timedelta(0))
        if task is not None:
            self._host_of_task[task] = offset
        if offset:
            self._audit.injected["clock_skewed_invocations"] += 1

    def offset(self) -> timedelta:
        task = self._scheduler.current()
        return self._host_of_task.get(task, timedelta(0)) if task is not None else timedelta(0)

    def now(self) -> datetime:
        return self._clock.now() + self.offset()

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)
