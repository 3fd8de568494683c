"""The end-to-end retry budget: how many times, at worst, one order makes the same call to one
remote service (one action, one idempotency key). Pure arithmetic over the values of the settings
named below: the caller passes them in (the domain reads no setting and no queue configuration).

Every layer that can repeat a call, outermost first (docs/supervisor.md has the full table):

- supervisor attempts, ``MAX_FAILURES``: each attempt runs the step again;
- Service Bus deliveries of one agent request, ``QUEUE_MAX_DELIVERY_COUNT``: the agent runs again;
- agent calls per delivery, ``AGENT_MAX_ATTEMPTS``, and no call starts after the step deadline;
- Durable activity retries: none (the scheduler uses plain ``call_activity``);
- Service Bus SDK send retries: collapsed by duplicate detection on the request id, no extra delivery;
- Cosmos DB SDK throttling retries: repeat Cosmos calls only, never a remote call.

    worst case = MAX_FAILURES × QUEUE_MAX_DELIVERY_COUNT × AGENT_MAX_ATTEMPTS

and, because an agent starts no call after its deadline and spaces its calls by a jittered
exponential backoff of at least half the nominal delay,

    worst case within the deadline
        = MAX_FAILURES × QUEUE_MAX_DELIVERY_COUNT × min(AGENT_MAX_ATTEMPTS, calls that fit in STEP_TIMEOUT)

An in-process agent (a Durable activity) is not redelivered by Service Bus: its delivery factor is 1.
An operator resubmit starts a fresh budget (it resets the failure count).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from domain.workflow import Transport

# ``domain.retry.exponential_backoff`` draws its jitter from [MIN_JITTER, 1.0] of the nominal delay.
MIN_JITTER = 0.5

# The budget docs/supervisor.md documents for the default settings (a test holds the code to it).
DEFAULT_SETTINGS_BUDGET = 60


def calls_fitting_in(deadline: timedelta, base: timedelta, cap: timedelta) -> int | None:
    """How many calls spaced by the shortest possible backoff (``MIN_JITTER`` × ``base·2^(n-1)``,
    capped at ``MIN_JITTER`` × ``cap``) can start within ``deadline`` of the first, calls taking no
    time. ``None`` when the backoff is zero: then only the attempt limit bounds the calls."""
    first = min(base, cap).total_seconds() * MIN_JITTER
    if first <= 0:
        return None
    budget = deadline.total_seconds()
    calls, elapsed, nominal = 1, 0.0, base.total_seconds()
    ceiling = cap.total_seconds()
    while nominal < ceiling:  # the doubling phase (at most a few dozen steps)
        delay = nominal * MIN_JITTER
        if elapsed + delay > budget:
            return calls
        elapsed += delay
        calls += 1
        nominal *= 2
    return calls + int((budget - elapsed) // (ceiling * MIN_JITTER))  # the capped phase


@dataclass(frozen=True)
class RetryBudget:
    supervisor_attempts: int
    deliveries_per_request: int
    agent_attempts: int
    agent_retry_base: timedelta
    agent_retry_max: timedelta
    step_timeout: timedelta

    def deliveries(self, transport: Transport) -> int:
        return self.deliveries_per_request if transport is Transport.SERVICE_BUS else 1

    def worst_case_calls(self, transport: Transport = Transport.SERVICE_BUS) -> int:
        """MAX_FAILURES × deliveries × AGENT_MAX_ATTEMPTS."""
        return self.supervisor_attempts * self.deliveries(transport) * self.agent_attempts

    def calls_per_delivery(self) -> int:
        """AGENT_MAX_ATTEMPTS, or fewer when fewer backoff-spaced calls fit in the step deadline."""
        fitting = calls_fitting_in(self.step_timeout, self.agent_retry_base, self.agent_retry_max)
        return self.agent_attempts if fitting is None else min(self.agent_attempts, fitting)

    def worst_case_calls_within_deadline(self, transport: Transport = Transport.SERVICE_BUS) -> int:
        """MAX_FAILURES × deliveries × min(AGENT_MAX_ATTEMPTS, calls that fit in STEP_TIMEOUT)."""
        return self.supervisor_attempts * self.deliveries(transport) * self.calls_per_delivery()
