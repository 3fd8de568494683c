"""Structured events for every state transition, recovery, compensation and alert.

Each is one log record with ``extra`` fields (exported by Azure Monitor OpenTelemetry as custom
dimensions) and a counter on the OpenTelemetry meter, so dashboards and alert rules can count
transitions by ``from``/``to`` without parsing text."""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import metrics

from domain.ids import instance_order_id
from domain.records import StateRecord
from domain.text import carriable
from domain.timefmt import text_or_none

log = logging.getLogger("orders")
_meter = metrics.get_meter("scheduler-agent-supervisor")
_transitions = _meter.create_counter(
    "orders.state_transitions", description="State record transitions, by from/to state and event"
)
_events = _meter.create_counter("orders.events", description="Recoveries, compensations, alerts, dead-letters")


def state_transition(before: StateRecord | None, after: StateRecord) -> None:
    event = after.history[-1].event if after.history else "Written"
    source = before.process_state.value if before is not None else "(new)"
    target = after.process_state.value
    _transitions.add(1, {"from": source, "to": target, "event": event})
    log.info(
        "order %s: %s -> %s (%s)",
        after.order_id,
        source,
        target,
        event,
        extra={
            "event": "StateTransition",
            "orderId": after.order_id,
            "fromState": source,
            "toState": target,
            "transition": event,
            "lockedBy": after.locked_by,
            "attempt": after.attempt,
            "failureCount": after.failure_count,
            "completeBy": text_or_none(after.complete_by),
        },
    )


def app_event(name: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """A named event (``SupervisorRecovered``, ``DeadLettered``, ``DependencyOutage``...; every name is listed in
    docs/observability.md). One about an orchestration instance of an order (``instanceId``) names the order too
    (``orderId``): the dimension an operator, the dashboards and the alert rules find an order's events by.
    ``message`` is logged on one line (``carriable``): it may quote a value from outside or one a record kept from
    before identifiers were one line (an alert's summary naming a payment's ``notificationId``), and a line break in
    it would forge a log line in every text sink (the console, a file, the Functions host's stream)."""
    _events.add(1, {"event": name})
    instance = fields.get("instanceId")
    if fields.get("orderId") is None and isinstance(instance, str) and (order := instance_order_id(instance)):
        fields["orderId"] = order
    log.log(level, carriable(message), extra={"event": name, **fields})
