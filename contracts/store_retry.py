"""The application property that marks a store-retry copy of an ``orders`` message (``submission.store_outage``:
a message that met a state store failure is sent again, scheduled, and its original completed) and the round
it carries. Read by the handlers that send copies, and by deferral, which recognises a copy of a tracked
notification (a new sequence number) by it. The reply relay's copies on ``agent-replies`` (a reply the Durable backend
could not take, ``order_agents.reply_relay``) carry the same property, sent by the same ``send_copy``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROUND_PROPERTY = "storeRetryRound"
ORIGINAL_PROPERTY = "storeRetryOriginal"  # the original's sequence number, on every copy


def property_value(properties: Mapping[Any, Any] | None, name: str) -> Any:
    """The value of application property ``name``, or None. Keys and values may be bytes (the SDK's AMQP
    properties)."""
    for key, value in (properties or {}).items():
        if (key.decode("utf-8", "replace") if isinstance(key, bytes) else key) == name:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return None


def retry_round(properties: Mapping[Any, Any] | None) -> int:
    """The round of this copy (0: the message as its sender sent it). Anything that is not a finite whole
    number (a client sets what it likes: text, a boolean, an infinite double) is round 0."""
    value = property_value(properties, ROUND_PROPERTY)
    if value is None or isinstance(value, bool):
        return 0
    try:
        return max(0, int(value))
    except (TypeError, ValueError, OverflowError):
        return 0


def is_copy(properties: Mapping[Any, Any] | None) -> bool:
    """Whether a message with these application properties is a store-retry copy (round 1 or more): its
    original may be tracked, or have been refused, under another sequence number."""
    return retry_round(properties) >= 1
