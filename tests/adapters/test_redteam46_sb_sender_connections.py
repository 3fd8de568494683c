"""The app's long-lived Service Bus senders after what a connection goes through on Azure, through the real
``azure-servicebus`` sender (its retry loop, ``_handle_exception``, ``_close_handler``) with only its AMQP link
replaced (``tests.adapters.test_sb_sdk_send_errors.Namespace``).

Red team, two ways a sender cached for the life of the worker failed sends the service never refused:
- A connection that went dead without a word (a gateway gone, a NAT entry dropped: no reset, the socket writes
  still succeed) leaves every send on it unsettled. The SDK counts its ``OperationTimeoutError`` as one that keeps
  the handler, so it retried on the same link, and so did every later send on the cached sender: each failed
  after the whole send timeout, until TCP gave up on the connection (about 15 minutes). A sender whose send
  failed is now dropped: the next send opens a new link and connection.
- The SDK's sender is not thread-safe (its README: use one per thread or a lock), and the Functions worker runs
  the app's sync activities and triggers on a pool of threads sharing one ``SdkMessageSender``. When the service
  closes a connection (``amqp:connection:forced``), the send that sees it closes the shared handler (the SDK sets
  ``_handler`` to None) under another thread that just opened it: that send failed at once with the SDK's
  non-retryable "Handler failed: 'NoneType' object has no attribute 'send_message'", without its retries. Each
  send now has a sender of its own while it runs (kept for the next send on the same queue)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, QueueNotFound, SdkMessageSender, SendError
from tests.adapters.test_sb_sdk_send_errors import Namespace

QUEUE = "submitter-7"
CONNECTION_FORCED = b"amqp:connection:forced"
LINK_DETACHED = b"amqp:link:detach-forced"


class Connections(Namespace):
    """Links as the service keeps them: the first ``half_open`` links never settle a send (each waits out its
    timeout); the service closes the connection under the first send the thread named ``dropped_for`` makes
    (``amqp:connection:forced``), and a send on a link closed meanwhile fails as pyamqp's does on a closed
    connection. A link opened after one was closed waits for ``hold_new_links`` (2 s at most) first: the thread
    that opens it was scheduled out."""

    def __init__(
        self, half_open: int = 0, dropped_for: str | None = None, token_failures: int = 0, detached: int = 0
    ) -> None:
        super().__init__()
        self.detached = detached  # how many of the first links the service detached (idle for 10 minutes)
        self.token_failures = token_failures  # how many of the first links fail to open: no token for them
        self.half_open = half_open
        self.dropped_for = dropped_for
        self.opened = 0
        self.closed: list[Any] = []
        self.hold_new_links = threading.Event()
        self.hold_new_links.set()

    def link(self, queue: str) -> Any:
        from azure.core.exceptions import ClientAuthenticationError
        from azure.servicebus._pyamqp.error import AMQPConnectionError, AMQPLinkError

        namespace = self
        if self.token_failures:  # the SDK opens a link after its CBS token: the credential's get_token raised
            self.token_failures -= 1
            raise ClientAuthenticationError("ManagedIdentityCredential: the token request failed (test)")
        if self.closed:
            self.hold_new_links.wait(2)
        self.opened += 1
        half_open = self.opened <= self.half_open
        detached = self.opened <= self.detached

        class Link:
            def send_message(self, message: Any, timeout: float | None = None) -> None:
                namespace.attempts[queue] = namespace.attempts.get(queue, 0) + 1
                if self in namespace.closed or threading.current_thread().name == namespace.dropped_for:
                    namespace.dropped_for = None
                    raise AMQPConnectionError(CONNECTION_FORCED, description="The connection was closed (test).")
                if detached:
                    raise AMQPLinkError(LINK_DETACHED, description="Idle timeout: 00:10:00. (test)")
                if half_open:
                    time.sleep(timeout or 0)
                    raise TimeoutError("send timed out")
                namespace.stored.setdefault(queue, []).append(message.properties.message_id)

            def close(self) -> None:
                namespace.closed.append(self)

        return Link()


def _message(message_id: str) -> OutgoingMessage:
    return OutgoingMessage(body="{}", message_id=message_id)


def test_a_send_after_one_that_timed_out_on_a_dead_connection_opens_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("adapters.servicebus.sender.SEND_TIMEOUT_SECONDS", 0.6)
    namespace = Connections(half_open=1)
    sender = SdkMessageSender(namespace.client())

    with pytest.raises(SendError):
        sender.send(QUEUE, _message("o1:Completed:1"))
    sender.send(QUEUE, _message("o2:Completed:1"))  # the next status: on a new connection

    assert namespace.stored[QUEUE] == ["o2:Completed:1"]
    assert namespace.opened == 2


def test_a_token_the_credential_cannot_fetch_is_a_transient_send_error_and_the_next_send_opens_again() -> None:
    """Held: the SDK wraps the credential's ``ClientAuthenticationError`` (a managed identity token request that
    failed) in a non-retryable ``ServiceBusError`` ("Handler failed: ..."): a ``SendError`` tried again later, not a
    queue that refuses the app (one alert per queue), and the next send fetches a token again."""
    namespace = Connections(token_failures=1)
    sender = SdkMessageSender(namespace.client())

    with pytest.raises(SendError) as raised:
        sender.send(QUEUE, _message("o1:Completed:1"))
    assert not isinstance(raised.value, QueueNotFound)
    sender.send(QUEUE, _message("o1:Completed:1"))

    assert namespace.stored[QUEUE] == ["o1:Completed:1"]


def test_a_link_the_service_detached_while_idle_is_opened_again_by_the_sdks_own_retry() -> None:
    """Held: Service Bus detaches a sender's link idle for 10 minutes (``amqp:link:detach-forced``); the SDK maps it
    to ``ServiceBusConnectionError``, closes the handler and retries the send on a new link, within the send."""
    namespace = Connections(detached=1)
    sender = SdkMessageSender(namespace.client())

    sender.send(QUEUE, _message("o1:Completed:1"))

    assert namespace.stored[QUEUE] == ["o1:Completed:1"]
    assert namespace.opened == 2


@pytest.fixture
def threads() -> Iterator[list[threading.Thread]]:
    made: list[threading.Thread] = []
    yield made
    for thread in made:
        thread.join(5)


def test_a_connection_the_service_closes_does_not_fail_another_threads_send(threads: list[threading.Thread]) -> None:
    """Thread B has opened the link and is about to send when thread A's send on it finds the connection closed
    by the service and the SDK closes its handler; the SDK opens another for A's retry."""
    namespace = Connections(dropped_for="A")
    namespace.hold_new_links.clear()  # A's retry opens its link once B went on
    sender = SdkMessageSender(namespace.client())
    b_opened = threading.Event()
    b_attached: list[Any] = []

    def after_attach(queue: str, sb_sender: Any) -> None:
        # ``_send`` opens the handler, then the transport's ``send_messages`` opens it again (a no-op when it
        # runs) and sends on ``sender._handler``: B is scheduled out between those two.
        if threading.current_thread().name != "B":
            return
        b_attached.append(sb_sender)
        if len(b_attached) == 2:
            b_opened.set()
            deadline = time.monotonic() + 2  # scheduled out until A's failure closed the handler B opened
            while time.monotonic() < deadline and (not namespace.closed or sb_sender._handler in namespace.closed):
                time.sleep(0.01)

    namespace.after_attach = after_attach
    outcome: dict[str, BaseException | None] = {}

    def send(name: str) -> None:
        try:
            sender.send(QUEUE, _message(f"o-{name}:Completed:1"))
        except BaseException as exc:
            outcome[name] = exc
        else:
            outcome[name] = None
        finally:
            if name == "B":
                namespace.hold_new_links.set()

    threads.append(threading.Thread(target=send, args=("B",), name="B", daemon=True))
    threads[-1].start()
    assert b_opened.wait(2)
    threads.append(threading.Thread(target=send, args=("A",), name="A", daemon=True))
    threads[-1].start()
    for thread in threads:
        thread.join(5)

    assert outcome == {"A": None, "B": None}, outcome
    assert sorted(namespace.stored[QUEUE]) == ["o-A:Completed:1", "o-B:Completed:1"]


def test_idle_senders_are_bounded_across_the_queues_the_app_sends_to() -> None:
    """Red team (rt-adapters-new): each idle sender holds an AMQP connection and a keep-alive thread, and a
    submitter's ``replyTo`` is any queue of the namespace. The idle ones were kept per queue for the life of the
    worker (up to 4 each, never closed): a worker that sent statuses to 40 reply queues, a few at a time, kept 160
    connections open, and so did every instance of a scale-out (40 instances: 6,400, past the 5,000 AMQP
    connections a Standard namespace takes, when the host's own triggers need theirs). Those idle the longest are
    closed once more than ``IDLE_SENDERS`` are kept in all; the queues sent to most stay warm."""
    from adapters.servicebus.sender import IDLE_SENDERS

    namespace = Connections()
    sender = SdkMessageSender(namespace.client())
    together = threading.Barrier(4)  # the four sends of a burst hold their senders at once
    attached: set[str] = set()

    def after_attach(queue: str, sb_sender: Any) -> None:
        name = threading.current_thread().name
        if name.startswith("burst") and name not in attached:
            attached.add(name)
            together.wait(2)

    namespace.after_attach = after_attach

    def burst(queue: str, n: int) -> None:
        sender.send(queue, _message(f"{queue}:{n}"))

    for q in range(40):
        queue = f"submitter-{q}"
        senders = [
            threading.Thread(target=burst, args=(queue, n), name=f"burst-{q}-{n}", daemon=True) for n in range(4)
        ]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(5)
        assert len(namespace.stored[queue]) == 4
    sender.send("submitter-39", _message("again"))  # the latest queue's sender is still kept: no new link

    assert namespace.opened == 4 * 40
    assert namespace.opened - len(namespace.closed) <= IDLE_SENDERS
    sender.close()
    assert len(namespace.closed) == namespace.opened


class Recreated(Connections):
    """A queue deleted and created again: the service detached the links attached to it then with ``amqp:not-found``
    (a send on one raises it, as pyamqp raises a link's detach error), and a link opened since sends."""

    def __init__(self) -> None:
        super().__init__()
        self.generation = 0  # how many times the queue was deleted and created again
        self.gone = False  # deleted, not created again: no link attaches

    def link(self, queue: str) -> Any:
        from azure.servicebus._pyamqp.error import AMQPLinkError

        inner = super().link(queue)
        namespace, born = self, self.generation

        class Link:
            def send_message(self, message: Any, timeout: float | None = None) -> None:
                if born < namespace.generation or namespace.gone:
                    raise AMQPLinkError(b"amqp:not-found", description="The messaging entity could not be found (test)")
                inner.send_message(message, timeout)

            def close(self) -> None:
                inner.close()

        return Link()


def test_a_kept_sender_of_a_queue_deleted_and_created_again_does_not_refuse_the_next_send() -> None:
    """Red team (rt-adapters-new): a submitter recreates its reply queue (its own deployment run again). The sender
    kept idle since still has the link the service detached when the queue was deleted, and the SDK raises its
    ``amqp:not-found`` (``MessagingEntityNotFoundError``, not retried): the status was refused (``QueueNotFound``: a
    ReplyQueueUnavailable alert, the status left to the refusal window) for a queue that exists, once per sender
    kept. A kept sender's refusal is tried once more on a new one."""
    namespace = Recreated()
    sender = SdkMessageSender(namespace.client())
    sender.send(QUEUE, _message("o1:Received:0"))

    namespace.generation += 1
    sender.send(QUEUE, _message("o1:Processing:1"))

    assert namespace.stored[QUEUE] == ["o1:Received:0", "o1:Processing:1"]


def test_a_queue_that_is_gone_is_refused_on_a_new_sender_too() -> None:
    namespace = Recreated()
    sender = SdkMessageSender(namespace.client())
    sender.send(QUEUE, _message("o1:Received:0"))

    namespace.generation += 1
    namespace.gone = True

    with pytest.raises(QueueNotFound):
        sender.send(QUEUE, _message("o1:Processing:1"))
    assert namespace.stored[QUEUE] == ["o1:Received:0"]
    assert namespace.opened == 2  # the kept sender, then one new one: not tried again
