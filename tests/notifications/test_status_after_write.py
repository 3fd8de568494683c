"""Status updates sent by code with no durable timer (the supervisor): a short bounded retry."""

from __future__ import annotations

import logging
from datetime import timedelta

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage, SendError
from domain import transitions
from notifications.status import publish_status_after_write


class FlakySender:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sent: list[tuple[str, OutgoingMessage]] = []

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise SendError("Service Bus unreachable")
        self.sent.append((queue, message))


def record():
    clock = ManualClock()
    return transitions.new_record("o1", "submitter-q", clock.now())


def test_a_send_that_fails_twice_is_retried_and_lands_once():
    clock, sender = ManualClock(), FlakySender(failures=2)
    start = clock.now()
    assert publish_status_after_write(sender, record(), "Failed", start, "boom", clock=clock) is True
    assert [(q, m.message_id) for q, m in sender.sent] == [("submitter-q", "o1:Failed:0")]
    assert clock.now() - start == timedelta(seconds=3)  # waited 1 s, then 2 s


def test_a_send_that_keeps_failing_is_logged_and_never_raises(caplog):
    clock, sender = ManualClock(), FlakySender(failures=10)
    with caplog.at_level(logging.WARNING):
        assert publish_status_after_write(sender, record(), "Failed", clock.now(), clock=clock) is False
    assert sender.sent == []
    assert [r.event for r in caplog.records if hasattr(r, "event")] == ["StatusSendFailed"]
