"""One time budget for a whole supervisor run, from its trigger's start to its last phase.

The host kills an invocation that runs past host.json's ``functionTimeout`` (30 minutes) and restarts the worker
process running it, failing every invocation on it (the agents' handlers, the activities: docs/local-runner.md).
Each phase of a run was bounded by a count (``SUPERVISOR_MAX_RECORDS`` records, a page per query), not by time:
under a Cosmos DB answering in 8-10 s a request, a run's recoveries took an hour (cut since at ``RECOVERY_BUDGET``)
and then a run took 23 minutes with the rest (the compensation claims, the owed-notification sweep), 7 minutes
from the host's cut. Now the trigger starts one ``RunBudget`` and every phase that goes over records, pages,
dependencies or queues asks it before each unit of work (``spent``): once the budget is spent it starts no more,
leaves the rest where the next run finds it (a cursor left before what it did not do, a record still due), and
says so once (``SupervisorPhaseStopped``, with the phase and its counts). What is already under way ends: a
unit is never cut half-way (a claimed round is always returned to the trigger and started).

``RUN_BUDGET``, 15 minutes: what runs after it is the unit of work under way then and the trigger's bounded
Durable calls. The longest unit is a claim or recovery that escalates: at most about eight Cosmos DB requests (the
order's read, a dependency's health, the conditional replace and its read-back after a lost answer, an alert mark's
read and write, the acknowledgement and its read-back; an escalation without lost answers is three) and three
Service Bus sends (``SEND_TIMEOUT``, 30 s each). A Cosmos DB request answered at the last moment takes the client's
``READ_TIMEOUT_SECONDS`` (20 s) plus the SDK's waits on 429s (at most 30 s): 8 x 50 s + 3 x 30 s = 8 minutes 10 s;
one that gets no answer at all fails after about 82 s (a read tried four times) and ends its unit as
``StoreUnavailable``. Then the starts (one wave at least, ``START_GRACE_SECONDS`` at most: 60 s); the terminations
and the dead-letter watch start nothing once the budget is spent. So a run ends by about 15 + 8 + 1 = 24 minutes at
worst, 6 under the host's 30. The recoveries have their own share inside it (``RECOVERY_BUDGET``, 10 minutes), so
that the claims and the owed sweep after them keep at least 5 minutes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from adapters.clock import Clock
from observability.events import app_event

RUN_BUDGET = timedelta(minutes=15)


@dataclass(frozen=True)
class RunBudget:
    """The deadline of one supervisor run, on the run's clock (``AppContext.clock``)."""

    clock: Clock
    ends: datetime
    length: timedelta  # as given: what the stop says was spent

    @classmethod
    def start(cls, clock: Clock, length: timedelta = RUN_BUDGET) -> RunBudget:
        return cls(clock, clock.now() + length, length)

    def spent(self) -> bool:
        """No unit of work may start any more."""
        return self.clock.now() >= self.ends

    def left(self) -> timedelta:
        return max(self.ends - self.clock.now(), timedelta(0))

    def share(self, length: timedelta) -> RunBudget:
        """A phase's own share of the run, from now: ``length``, or what is left of the run if less."""
        now = self.clock.now()
        if now + length <= self.ends:
            return RunBudget(self.clock, now + length, length)
        return self

    def stopped(self, phase: str, **counts: Any) -> None:
        """Logs that ``phase`` starts no more work, this budget spent: ``counts`` say what it did and left."""
        said = ", ".join(f"{name} {value}" for name, value in counts.items())
        app_event(
            "SupervisorPhaseStopped",
            f"supervisor run: {phase} stopped, its budget ({self.length.total_seconds():.0f} s) spent; the rest is "
            f"left for a later run ({said})",
            logging.WARNING,
            phase=phase,
            budgetSeconds=self.length.total_seconds(),
            **counts,
        )
