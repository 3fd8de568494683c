"""A Service Bus settlement is a round trip, and the worker waits for it where it calls it.

``ServiceBusMessageActions`` (azurefunctions-extensions-bindings-servicebus) settles with a blocking gRPC call
to the host, whose ``SettlementService`` answers once the .NET SDK's ``CompleteMessageAsync`` (abandon,
dead-letter, defer) has Service Bus's answer: milliseconds, or seconds while the SDK retries. Its methods
are not coroutines, so an async function that calls one holds the worker's event loop, and every other
invocation of the worker, for that long. The runner answered the call at once and spent
``servicebus.settle_latency_ms`` after the handler's first blocking work instead, in the handler's own
thread (other handlers ran meanwhile): ``submit_order`` and ``agent_reply_relay``, both async, settled on
the loop and no run counted it (``blocking_sleeps_on_worker_loop``, 0 in every end-to-end test)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from azurefunctions.extensions.bindings.servicebus import ServiceBusMessageActions

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from localrun.profile import Profile
from localrun.report import build_report
from localrun.servicebus import InProcessBroker, QueuePolicy
from localrun.servicebus.settlement_server import (
    SettlementServer,
    install_message_actions,
    settle_round_trip,
    uninstall_message_actions,
)
from localrun.servicebus.wire import decode_as_trigger
from localrun.simulation import SimulationConfig, run_simulation


@pytest.fixture
def settling() -> Iterator[tuple[InProcessBroker, SettlementServer]]:
    broker = InProcessBroker(ManualClock(datetime(2026, 1, 1, tzinfo=UTC)))
    broker.declare_queue("q", QueuePolicy())
    server = SettlementServer(broker)
    actions = install_message_actions(server.start())
    try:
        yield broker, server
    finally:
        uninstall_message_actions(actions)
        server.stop()


def test_the_settlement_call_waits_its_round_trip_in_the_calling_thread_before_it_settles(
    settling: tuple[InProcessBroker, SettlementServer],
) -> None:
    broker, server = settling
    broker.send("q", OutgoingMessage(body="{}", message_id="m1"))
    got = broker.receive("q")
    assert got is not None
    message = decode_as_trigger(got)
    seen: list[tuple[str, int]] = []
    token = settle_round_trip.set(lambda: seen.append((threading.current_thread().name, len(broker.contents("q")))))
    try:
        with server.invocation(str(message.lock_token)):
            ServiceBusMessageActions.get_instance().complete(message)
    finally:
        settle_round_trip.reset(token)
    assert seen == [(threading.current_thread().name, 1)]  # the caller waited, the message not yet settled
    assert broker.contents("q") == []


def test_no_trigger_settles_on_the_worker_event_loop() -> None:
    """With every settlement a round trip, a run's async triggers (``submit_order``, ``agent_reply_relay``)
    settle off the loop: the app before this test settled on it, 15 loop waits in this run."""
    profile = Profile.parse({"servicebus": {"settle_latency_ms": [50, 50]}})
    result = run_simulation(SimulationConfig(orders=5, seed=1, profile=profile))
    report = build_report(result)
    assert result.host.executions["submit_order"] >= 5
    assert result.host.executions["agent_reply_relay"] >= 5
    assert report["runtime"]["blocking_sleeps_on_worker_loop"] == 0
    assert not any(report["invariants"].values())
