"""Per-queue operation counters (what the runner turns into operations per order)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class QueueCounters:
    sent: int = 0  # messages stored (a scheduled message counts when sent)
    duplicates_dropped: int = 0  # sends accepted but discarded by duplicate detection
    send_failures: int = 0  # sends that raised SendError (injected faults)
    refused_sends: int = 0  # sends refused by an injected SendRefusal (queue full, missing, unauthorised)
    limit_violations: int = 0  # sends refused for breaking a Service Bus limit (MessageId, size, properties)
    delivered: int = 0  # peek-lock deliveries to the trigger (redeliveries included)
    deferred_received: int = 0  # deferred messages fetched by sequence number
    completed: int = 0
    abandoned: int = 0
    deferred: int = 0
    dead_lettered: int = 0  # every reason: explicit, MaxDeliveryCountExceeded, TTLExpiredException
    expired: int = 0  # TTL expiries (dead-lettered or dropped)
    lock_expirations: int = 0
    lock_renewals: int = 0
    peeked: int = 0  # peek calls

    @property
    def send_operations(self) -> int:
        """Send calls the service would bill: stored and duplicate-dropped."""
        return self.sent + self.duplicates_dropped

    @property
    def receive_operations(self) -> int:
        """Receives: trigger deliveries and deferred fetches."""
        return self.delivered + self.deferred_received

    def add(self, other: QueueCounters) -> QueueCounters:
        return QueueCounters(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})
