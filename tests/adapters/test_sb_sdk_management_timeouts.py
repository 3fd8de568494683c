"""A fetch by sequence number or a peek the service never answers ends within a bound (``adapters.servicebus.
deferred_sdk.REQUEST_TIMEOUT_SECONDS``), through the real ``azure-servicebus`` receiver.

Both are management requests. Without a ``timeout`` (and the client's ``try_timeout`` is unset by default) the SDK
hands pyamqp's management operation none, and it waits for the response as long as the connection lives: a
deferral round or the peek sweep would hold its invocation until ``functionTimeout``. Found after the red team on
the sender (``test_sb_sdk_send_errors.py``) bounded sends the same way. Here the real ``ServiceBusReceiver`` runs
(its retry loop, ``_mgmt_request_response``, the pyamqp transport's request) with only the AMQP client below it
replaced by one whose management link never answers."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from adapters.servicebus.deferred import ReceiveError
from adapters.servicebus.deferred_sdk import SdkDeferredStore
from tests.adapters.test_sb_sdk_send_errors import CONNECTION


class SilentManagementLink:
    """pyamqp's ``AMQPClient.mgmt_request``: a timeout of 0 or None waits for the response with no end."""

    _link = None  # no receive link: nothing was received on it, closing drains nothing

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def mgmt_request(self, message: Any, **kwargs: Any) -> Any:
        if not self.release.wait(kwargs.get("timeout") or None):
            raise TimeoutError("no management response")
        raise ConnectionError("the connection closed")

    def close(self) -> None:
        pass


def _fails_within_the_bound(call: str, release: threading.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    """``call`` on a receiver of ``orders`` (bound: 0.5 s) raised the SDK's error within 10 s; then ``release``."""
    from azure.servicebus import ServiceBusClient
    from azure.servicebus.exceptions import ServiceBusError

    monkeypatch.setattr("adapters.servicebus.deferred_sdk.REQUEST_TIMEOUT_SECONDS", 0.5)
    client = ServiceBusClient.from_connection_string(
        CONNECTION, retry_total=1, retry_backoff_factor=0.001, retry_backoff_max=1
    )
    raised: list[BaseException] = []

    def run() -> None:
        try:
            with SdkDeferredStore(client).open("orders") as receiver:
                if call == "peek":
                    receiver.peek(10)
                else:
                    receiver.receive_deferred([5])
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    still_waiting = worker.is_alive()
    release.set()  # before the fix: the request was still waiting after 10 s
    worker.join(5)
    assert not still_waiting
    # the SDK's timeout, as the adapter raises every failure of a fetch or peek (tests/identity, the red team on tokens)
    assert raised and isinstance(raised[0], ReceiveError) and isinstance(raised[0].__cause__, ServiceBusError), raised


@pytest.mark.parametrize("call", ["fetch by sequence number", "peek"])
def test_a_management_request_the_service_never_answers_fails_within_the_bound(
    call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.servicebus import ServiceBusReceiver

    release = threading.Event()
    link = SilentManagementLink(release)

    def attach(receiver: Any, *_args: Any, **_kwargs: Any) -> None:  # the link the SDK would open
        receiver._handler = link
        receiver._running = True

    monkeypatch.setattr(ServiceBusReceiver, "_open", attach)
    _fails_within_the_bound(call, release, monkeypatch)


class SilentService:
    """pyamqp's ``AMQPClient`` on a connection the service never answers past TCP: ``open`` sends the AMQP
    header and frames, and ``client_ready`` stays False (no open, begin or attach comes back)."""

    _shutdown = False
    _link = None

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def open(self, connection: Any = None) -> None:
        pass

    def client_ready(self) -> bool:
        if self.release.is_set():
            raise ConnectionError("the connection closed")
        return False

    def close(self) -> None:
        pass


@pytest.mark.parametrize("call", ["fetch by sequence number", "peek"])
def test_a_receiver_whose_link_never_opens_fails_within_the_bound(call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Red team: the receiver was opened by its context manager (``__enter__``: the SDK's ``_open_with_retry``, with
    no timeout and the client's ``try_timeout`` unset), whose wait for the link to be ready has no end: a
    connection the service accepts and never answers held the trigger (or the operator's request) until
    ``functionTimeout``. The receiver is now opened by its first request, within that request's bound."""
    from azure.servicebus import ServiceBusReceiver

    release = threading.Event()

    def create_handler(receiver: Any, auth: Any) -> None:  # the SDK's own _open runs above it
        receiver._handler = SilentService(release)

    monkeypatch.setattr(ServiceBusReceiver, "_create_handler", create_handler)
    _fails_within_the_bound(call, release, monkeypatch)
