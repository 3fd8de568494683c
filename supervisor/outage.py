"""Waiting an outage out: the supervisor's reading of dependency health (``domain/circuit.py``).

An expired attempt (or a stuck compensation round) whose dependency's circuit is open, or was open at
some moment since the step (round) began, failed because of the outage, not because of the order:
it is not counted against ``MAX_FAILURES``. The order is rescheduled for after the circuit's next
probe, plus a jitter of up to one cool-down so a closing circuit does not release every waiting
order at once (the starter's admission caps still apply on top). After ``MAX_OUTAGE_WAIT_MINUTES``
of waiting (``outageWaitSince``) the order escalates anyway, with a reason that says so.

When the health store cannot be read the attempt counts as it did before circuits existed."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from adapters.cosmos.errors import StoreError
from dependencies import AppContext
from domain.circuit import CircuitState
from domain.outage import InFlight
from domain.records import StateRecord

log = logging.getLogger("supervisor")


@dataclass(frozen=True)
class OutageVerdict:
    dependency: str
    until: datetime  # not retried before this
    since: datetime  # the order has been waiting since
    exceeded: bool  # waited MAX_OUTAGE_WAIT_MINUTES or longer: escalate anyway
    bound: timedelta

    def escalation_reason(self, now: datetime) -> str:
        minutes = (now - self.since).total_seconds() / 60
        return (
            f"{self.dependency} unavailable (circuit open) and the order waited {minutes:.0f} min, "
            f"beyond MAX_OUTAGE_WAIT_MINUTES={self.bound.total_seconds() / 60:.0f}: escalated although only the "
            "outage failed it"
        )


def outage_verdict(
    ctx: AppContext, record: StateRecord, in_flight: InFlight | None, now: datetime
) -> OutageVerdict | None:
    """None when the failure was the order's own (no dependency in flight, or its circuit stayed
    closed since the step began); else when to come back, or that the wait is over."""
    if ctx.health is None or in_flight is None or not ctx.settings.max_outage_wait:
        return None  # MAX_OUTAGE_WAIT_MINUTES=0: never wait, every failure counts
    try:
        health = ctx.health.get(in_flight.dependency)
    except StoreError as exc:
        log.warning(
            "order %s: health of %s unknown (%s); counted as a failure",
            record.order_id,
            in_flight.dependency,
            exc,
            extra={"event": "DependencyHealthUnavailable", "orderId": record.order_id},
        )
        return None
    if health is None or not health.outage_overlaps(in_flight.since):
        return None
    policy = ctx.settings.circuit_policy
    spread = policy.cooldown_after(health.reopens)
    base = now if health.state is CircuitState.CLOSED else health.next_probe(now, policy)
    until = base + timedelta(seconds=ctx.rng.uniform(0, spread.total_seconds()))
    since = record.outage_wait_since or now
    bound = ctx.settings.max_outage_wait
    return OutageVerdict(in_flight.dependency, until, since, now - since >= bound, bound)
