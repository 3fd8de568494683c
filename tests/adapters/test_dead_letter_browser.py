"""``SdkDeadLetterBrowser`` opens the SDK's receiver on the queue's dead-letter subqueue (``sub_queue=DEAD_LETTER``:
``<queue>/$DeadLetterQueue``), peeks it from a sequence number with the bounded request, and closes it."""

from __future__ import annotations

from typing import Any

from adapters.servicebus.dead_letters import SdkDeadLetterBrowser
from adapters.servicebus.deferred_sdk import REQUEST_TIMEOUT_SECONDS


class _Receiver:
    def __init__(self) -> None:
        self.peeks: list[dict[str, Any]] = []
        self.closed = False

    def peek_messages(self, **kwargs: Any) -> list[Any]:
        self.peeks.append(kwargs)
        return []

    def close(self) -> None:
        self.closed = True


class _Client:
    def __init__(self) -> None:
        self.opened: list[dict[str, Any]] = []
        self.receiver = _Receiver()

    def get_queue_receiver(self, **kwargs: Any) -> _Receiver:
        self.opened.append(kwargs)
        return self.receiver


def test_it_peeks_the_dead_letter_subqueue_and_closes_it() -> None:
    from azure.servicebus import ServiceBusSubQueue

    client = _Client()
    with SdkDeadLetterBrowser(client).open_dead_letters("orders") as dead:  # type: ignore[arg-type]
        assert dead.peek(100, 8) == []
    assert client.opened == [{"queue_name": "orders", "sub_queue": ServiceBusSubQueue.DEAD_LETTER}]
    assert client.receiver.peeks == [
        {"max_message_count": 100, "sequence_number": 8, "timeout": REQUEST_TIMEOUT_SECONDS}
    ]
    assert client.receiver.closed
