"""Scheduling a ``RetryDeferred``: the app's message to itself to try a deferred message again."""

from __future__ import annotations

from adapters.servicebus.sender import OutgoingMessage
from contracts.messages import RetryDeferred
from contracts.names import ORDERS_QUEUE
from dependencies import AppContext


def retry_message_id(sequence_number: int, round_number: int, tag: str = "") -> str:
    """Deterministic: a re-sent retry of the same round collapses in duplicate detection."""
    return f"retry-deferred:{sequence_number}:{round_number}{tag}"


# The tag of the one RetryDeferred (round 1) a notification deferred for a missing order gets.
ORDER_LOOK_AGAIN = ":order"


def schedule_retry(
    ctx: AppContext, order_id: str, sequence_number: int, message_id: str, round_number: int, tag: str = ""
) -> None:
    """Sends ``RetryDeferred`` for round ``round_number``, due after ``DEFER_RETRY_DELAY_SECONDS``.
    ``tag`` ``ORDER_LOOK_AGAIN`` marks the one look again of a message deferred because its
    order did not exist: it covers an order submitted concurrently, whose submission looked for
    deferred messages before this one was deferred."""
    retry = RetryDeferred(
        type="RetryDeferred",
        schema_version=1,
        sequence_number=sequence_number,
        order_id=order_id,
        message_id=message_id or "-",
        round=round_number,
    )
    ctx.sender.send(
        ORDERS_QUEUE,
        OutgoingMessage(
            body=retry.to_json(),
            message_id=retry_message_id(sequence_number, round_number, tag),
            subject="RetryDeferred",
            correlation_id=order_id,
            scheduled_enqueue_time=ctx.clock.now() + ctx.settings.defer_retry_delay,
        ),
    )
