"""Red team (rt-adapters-new), held: every trigger's Durable client calls go through ``adapters.durable_client``'s
bound, which cancels a call the extension holds. The worker's own cancellation of an invocation (the host going away,
an invocation given up) must reach the trigger as ``CancelledError``, never be taken for a failed call the trigger
logs and goes on from (``except Exception`` does not catch it); the bound's own give-up is a ``TimeoutError``, a failed
call like the SDK's others."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from adapters import durable_client
from adapters.clock import ManualClock
from adapters.durable_client import bounded_client
from orchestrators.names import SCHEDULER
from orchestrators.raise_events import RaiseEvent, raise_events
from orchestrators.starter import start_orchestrations
from order_agents.reply_relay import relay_reply
from supervisor.terminate import terminate_expired
from tests.agents.support import START, StartClaim, make_context
from tests.agents.test_redteam46_durable_session_shared import REPLY
from tests.fakes import FakeReceivedMessage


class HeldExtension:
    """A Durable client whose every call the extension holds until cancelled."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.cancelled = 0

    async def _held(self, name: str) -> Any:
        self.calls.append(name)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
        return str(await self._held("start_new"))

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None:
        await self._held("raise_event")

    async def get_status(self, instance_id: str, **options: bool) -> Any:
        return await self._held("get_status")

    async def terminate(self, instance_id: str, reason: str) -> None:
        await self._held("terminate")


TRIGGER_CALLS: dict[str, Callable[[Any], Awaitable[Any]]] = {
    "starter": lambda client: start_orchestrations(
        client, SCHEDULER, [StartClaim("o-c", "o-c:1")], timedelta(seconds=60)
    ),
    "reply relay": lambda client: relay_reply(
        client, FakeReceivedMessage.of(json.dumps(REPLY)), make_context(ManualClock(START))
    ),
    "events": lambda client: raise_events(client, [RaiseEvent("o-c:1", "PaymentReceived", {})]),
    "supervisor terminate": lambda client: terminate_expired(client, ["o-c:1"]),
}


@pytest.mark.parametrize("trigger", sorted(TRIGGER_CALLS))
def test_the_workers_own_cancellation_reaches_the_trigger_as_a_cancellation(
    trigger: str, caplog: pytest.LogCaptureFixture
) -> None:
    extension = HeldExtension()

    async def cancelled_meanwhile() -> None:
        task = asyncio.ensure_future(TRIGGER_CALLS[trigger](bounded_client(extension)))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.INFO):
        asyncio.run(cancelled_meanwhile())
    assert extension.calls and extension.cancelled == len(extension.calls) == 1
    events = [getattr(r, "event", None) for r in caplog.records if getattr(r, "event", None)]
    assert events == [], events  # nothing logged as a failed call: the invocation itself was cancelled


@pytest.mark.parametrize("trigger", sorted(TRIGGER_CALLS))
def test_a_call_the_bound_gives_up_is_a_failed_call_and_the_extension_lets_it_go(
    trigger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable_client, "DURABLE_CALL_TIMEOUT", timedelta(seconds=0.05))
    extension = HeldExtension()
    asyncio.run(asyncio.wait_for(TRIGGER_CALLS[trigger](bounded_client(extension)), 5))  # returns: handled
    assert extension.calls and extension.cancelled == len(extension.calls)
