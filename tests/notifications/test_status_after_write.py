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


def test_the_status_activity_sends_to_the_queue_it_is_given_without_reading_the_record():
    import random

    from activities.scheduler_steps import publish_order_status
    from dependencies import AppContext
    from settings import Settings
    from tests.fakes import RecordingSender

    class NoReads:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"the state store was used: {name}")

    sender = RecordingSender()
    ctx = AppContext(Settings.from_env({}), ManualClock(), NoReads(), NoReads(), sender, {}, random.Random(1))  # type: ignore[arg-type]
    publish_order_status(ctx, {"orderId": "o1", "status": "Completed", "attempt": 2, "replyTo": "submitter-7"})
    assert sender.message_ids("submitter-7") == ["o1:Completed:2"]
