"""Settlement exactly as in Azure: the extension's own ``ServiceBusMessageActions`` singleton, built
from the worker's command line, sends the real gRPC ``Settlement`` calls to the runner's settlement
server, which settles on a real ``InProcessBroker``. The message settled is the real
``azure.servicebus.ServiceBusReceivedMessage`` the extension's converter makes from the host's bytes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions
from azurefunctions.extensions.bindings.servicebus.serviceBusMessageActions import SettlementError

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from adapters.servicebus.settlement import Settlement, apply_settlement
from localrun.servicebus import MAX_DELIVERY_COUNT_EXCEEDED, BrokerMessage, InProcessBroker, QueuePolicy
from localrun.servicebus.settlement_server import (
    HOST_MAX_MESSAGE_LENGTH,
    SettlementServer,
    install_message_actions,
    uninstall_message_actions,
    worker_argv,
)
from localrun.servicebus.wire import decode_as_trigger

START = datetime(2026, 1, 1, tzinfo=UTC)
LOCK = timedelta(seconds=30)


@dataclass
class Host:
    broker: InProcessBroker
    clock: ManualClock
    server: SettlementServer
    actions: ServiceBusMessageActions

    def deliver(self) -> tuple[BrokerMessage, Any]:
        """Receive the next message as the host does and decode it as the worker does."""
        got = self.broker.receive("q")
        assert got is not None
        return got, decode_as_trigger(got)


@pytest.fixture
def host() -> Iterator[Host]:
    clock = ManualClock(START)
    broker = InProcessBroker(clock)
    broker.declare_queue("q", QueuePolicy(lock_duration=LOCK, max_delivery_count=3))
    server = SettlementServer(broker)
    address = server.start()
    actions = install_message_actions(address)
    try:
        yield Host(broker, clock, server, actions)
    finally:
        uninstall_message_actions(actions)
        server.stop()


def send(h: Host, message_id: str = "m1", body: str = '{"a": 1}') -> None:
    h.broker.send("q", OutgoingMessage(body=body, message_id=message_id))


def rpc_error(caught: pytest.ExceptionInfo[SettlementError]) -> grpc.RpcError:
    original = caught.value.original
    assert isinstance(original, grpc.RpcError)
    return original


def test_the_singleton_is_the_extensions_own_pointed_at_the_server(host: Host) -> None:
    argv_before = list(sys.argv)
    assert ServiceBusMessageActions.get_instance() is host.actions
    assert type(host.actions) is ServiceBusMessageActions
    assert host.actions._uri == host.server.address
    assert host.actions._grpc_max_message_length == HOST_MAX_MESSAGE_LENGTH
    assert sys.argv == argv_before  # the worker arguments were set for the constructor only


def test_a_second_host_gets_its_own_singleton(host: Host) -> None:
    other = SettlementServer(host.broker)
    try:
        replacement = install_message_actions(other.start())
        assert ServiceBusMessageActions.get_instance() is replacement is not host.actions
        assert replacement._uri == other.address != host.server.address
        uninstall_message_actions(host.actions)  # a stale owner does not remove the new one
        assert ServiceBusMessageActions._instance is replacement
        uninstall_message_actions(replacement)
        assert ServiceBusMessageActions._instance is None
    finally:
        other.stop()


def test_worker_argv_is_what_the_extension_parses() -> None:
    from azurefunctions.extensions.bindings.servicebus.grpc_utils import parse_grpc_args

    args = parse_grpc_args(worker_argv("127.0.0.1:5123", 1024))
    assert (args.host, args.port, args.functions_grpc_max_message_length) == ("127.0.0.1", "5123", 1024)
    with pytest.raises(ValueError):
        worker_argv("no-port", 1024)


def test_complete_removes_the_message(host: Host) -> None:
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        host.actions.complete(message)
    host.clock.advance(LOCK * 10)
    assert host.broker.receive("q") is None
    assert host.broker.counters("q").completed == 1
    assert host.server.calls["Complete"] == 1


def test_abandon_redelivers_with_the_delivery_count_raised(host: Host) -> None:
    send(host)
    first, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        host.actions.abandon(message)
    again, _ = host.deliver()  # at once: abandon released the lock
    assert (first.delivery_count, again.delivery_count) == (1, 2)
    assert again.message_id == "m1"
    assert host.server.calls["Abandon"] == 1


def test_deadletter_carries_reason_and_description(host: Host) -> None:
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        host.actions.deadletter(
            message, deadletter_reason="InvalidFields", deadletter_error_description="field 'orderId' is missing"
        )
    (dead,) = host.broker.dead_letters("q")
    assert (dead.message_id, dead.reason, dead.description) == ("m1", "InvalidFields", "field 'orderId' is missing")
    assert host.broker.receive("q") is None


@pytest.mark.parametrize(
    ("reason", "description"),
    [("R" * 4097, "d"), ("R", "d" * 4097), ("R", "\U0001f4a5" * 2049)],  # 2,049 emoji: 4,098 UTF-16 units
    ids=["reason", "description", "description-in-utf16-units"],
)
def test_deadletter_text_over_4096_characters_is_refused_and_the_message_keeps_its_lock(
    host: Host, reason: str, description: str
) -> None:
    """The host dead-letters with the .NET SDK, whose ``AmqpReceiver.DeadLetterInternalAsync`` asserts the
    reason and the description are at most ``Constants.MaxDeadLetterReasonLength`` (4,096) characters long,
    in .NET's UTF-16 units: the settlement fails and nothing is settled (azure-sdk-for-net,
    sdk/servicebus/Azure.Messaging.ServiceBus/src/Amqp/AmqpReceiver.cs)."""
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        with pytest.raises(SettlementError) as caught:
            host.actions.deadletter(message, deadletter_reason=reason, deadletter_error_description=description)
        error = rpc_error(caught)
        assert error.code() is grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
        assert "ArgumentOutOfRangeException" in error.details()  # type: ignore[attr-defined]
        assert host.broker.dead_letters("q") == []
        host.actions.deadletter(  # still locked to it: the same message settles with text the SDK takes
            message, deadletter_reason="R" * 4096, deadletter_error_description="\U0001f4a5" * 2048
        )
    (dead,) = host.broker.dead_letters("q")
    assert dead.reason == "R" * 4096


def test_deadletter_without_reason_sends_none(host: Host) -> None:
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        host.actions.deadletter(message)
    (dead,) = host.broker.dead_letters("q")
    assert (dead.reason, dead.description) == (None, None)


def test_defer_makes_it_receivable_only_by_sequence_number(host: Host) -> None:
    send(host)
    received, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        host.actions.defer(message)
    host.clock.advance(LOCK * 10)
    assert host.broker.receive("q") is None
    with host.broker.deferred_store.open("q") as receiver:
        (fetched,) = receiver.receive_deferred([message.sequence_number])
        assert fetched.message_id == received.message_id
        receiver.complete(fetched)


def test_a_second_settlement_of_the_same_lock_fails_as_in_azure(host: Host) -> None:
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        host.actions.complete(message)
        with pytest.raises(SettlementError) as caught:
            host.actions.abandon(message)
    assert caught.value.method == "abandon"
    error = rpc_error(caught)
    assert error.code() is grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
    assert "MessageLockLost" in error.details()  # type: ignore[attr-defined]
    assert host.broker.counters("q").completed == 1


def test_settlement_after_lock_expiry_fails_and_the_message_comes_back(host: Host) -> None:
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        host.clock.advance(LOCK + timedelta(seconds=1))
        with pytest.raises(SettlementError) as caught:
            host.actions.complete(message)
    assert rpc_error(caught).code() is grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
    again, _ = host.deliver()
    assert again.delivery_count == 2


def test_settlement_after_the_execution_ended_is_not_found(host: Host) -> None:
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        pass
    with pytest.raises(SettlementError) as caught:
        host.actions.complete(message)
    error = rpc_error(caught)
    assert error.code() is grpc.StatusCode.FAILED_PRECONDITION  # type: ignore[attr-defined]
    assert error.details() == f"LockToken {message.lock_token} not found."  # type: ignore[attr-defined]
    assert host.broker.counters("q").completed == 0


def test_renew_message_lock_keeps_the_message_locked(host: Host) -> None:
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        host.clock.advance(LOCK - timedelta(seconds=5))
        host.actions.renew_message_lock(message)
        host.clock.advance(timedelta(seconds=20))  # past the first lock, inside the renewed one
        assert host.broker.receive("q") is None
        host.actions.complete(message)
    assert host.broker.counters("q").lock_renewals == 1
    assert host.server.calls["RenewMessageLock"] == 1


def test_the_last_abandon_dead_letters_as_max_delivery_count(host: Host) -> None:
    send(host)
    for _ in range(3):
        _, message = host.deliver()
        with host.server.invocation(str(message.lock_token)):
            host.actions.abandon(message)
    (dead,) = host.broker.dead_letters("q")
    assert dead.reason == MAX_DELIVERY_COUNT_EXCEEDED


@pytest.mark.parametrize(
    ("settlement", "check"),
    [
        (Settlement.complete(), lambda h: h.broker.counters("q").completed == 1),
        (Settlement.abandon("store down"), lambda h: h.deliver()[0].delivery_count == 2),
        (
            Settlement.deadletter("NotJson", "body is not JSON"),
            lambda h: (
                [(d.reason, d.description) for d in h.broker.dead_letters("q")] == [("NotJson", "body is not JSON")]
            ),
        ),
        (Settlement.defer(), lambda h: h.broker.counters("q").deferred == 1 and h.broker.receive("q") is None),
    ],
    ids=["complete", "abandon", "deadletter", "defer"],
)
def test_the_apps_apply_settlement_works_with_the_real_types(host: Host, settlement: Settlement, check: Any) -> None:
    """``adapters.servicebus.settlement.apply_settlement`` calls the extension's methods with the
    parameter names it has (``deadletter(message, deadletter_reason=..., deadletter_error_description=...)``)."""
    send(host)
    _, message = host.deliver()
    with host.server.invocation(str(message.lock_token)):
        apply_settlement(host.actions, message, settlement)
    assert check(host)


def test_the_shared_server_serves_one_host_broker_at_a_time() -> None:
    """One worker process: the singleton is built once against the shared server; each host attaches
    its broker; after a host detaches, its tokens are not found; a new host's broker is served."""
    server = SettlementServer.shared()
    assert SettlementServer.shared() is server
    assert ServiceBusMessageActions.get_instance()._uri == server.address
    hosts: list[InProcessBroker] = []
    for _ in range(2):
        clock = ManualClock(START)
        broker = InProcessBroker(clock)
        broker.declare_queue("q", QueuePolicy(lock_duration=LOCK))
        broker.send("q", OutgoingMessage(body="{}", message_id="m"))
        server.attach(broker)
        got = broker.receive("q")
        assert got is not None
        message = decode_as_trigger(got)
        with server.invocation(message):
            ServiceBusMessageActions.get_instance().complete(message)
        assert broker.counters("q").completed == 1
        with pytest.raises(RuntimeError, match="detach"):
            server.attach(InProcessBroker(clock))
        server.detach(broker)
        hosts.append(broker)
    old_broker = hosts[0]
    old_broker.send("q", OutgoingMessage(body="{}", message_id="m2"))
    late = old_broker.receive("q")
    assert late is not None
    with server.invocation(late.lock_token), pytest.raises(SettlementError) as caught:
        ServiceBusMessageActions.get_instance().complete(decode_as_trigger(late))
    assert rpc_error(caught).code() is grpc.StatusCode.FAILED_PRECONDITION  # type: ignore[attr-defined]
