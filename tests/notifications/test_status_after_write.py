"""The ``publish_status`` activity, which sends a status after the write that made it true."""

from __future__ import annotations

from adapters.clock import ManualClock
from tests.activity_calls import run


def test_the_status_activity_sends_to_the_queue_it_is_given_without_reading_the_record():
    import random

    from activities.scheduler_steps import publish_status
    from dependencies import AppContext
    from settings import Settings
    from tests.fakes import RecordingSender

    class NoReads:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"a store was used: {name}")

    sender = RecordingSender()
    unused = NoReads()
    ctx = AppContext(
        Settings.from_env({}),
        ManualClock(),
        unused,  # type: ignore[arg-type]
        unused,  # type: ignore[arg-type]
        sender,
        {},
        deferred=unused,  # type: ignore[arg-type]
        deferrals=unused,  # type: ignore[arg-type]
        ops=unused,  # type: ignore[arg-type]
        health=unused,  # type: ignore[arg-type]
        rng=random.Random(1),
    )
    run(publish_status, ctx, {"orderId": "o1", "status": "Completed", "attempt": 2, "replyTo": "submitter-7"})
    assert sender.message_ids("submitter-7") == ["o1:Completed:2"]
