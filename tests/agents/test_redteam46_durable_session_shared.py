"""One Durable client call the extension holds past the SDK's own timeout fails the worker's other calls in flight.

The SDK keeps one ``aiohttp.ClientSession`` per worker process (``azure.durable_functions.models.utils.http_utils``),
with a 240 s total timeout, and closes it whenever one request raises aiohttp's ``ClientError`` or a timeout
(``_handle_request_error``): every other request in flight on it then fails (``ClientConnectionError: Connector is
closed.``), whatever the extension does with it; the next call opens a new session. A stall is what the Durable
extension does when its storage is slow: a reply relayed to one order held the session's timeout long, and the
starter starting another order at that moment got ``StartFailed`` for a start the extension carried out (the record
left for the supervisor, after the start grace). The app's own bound (``asyncio.wait_for``, shorter than the SDK's)
cancels the stalled call instead: the SDK does not catch a cancellation, so its session and the other calls live.

The stall is the runner's hook at its HTTP edge (``DurableExtensionApi.before_answer``), below the real client; the
SDK's 240 s is shortened here by giving it a session like its own with a shorter total timeout."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from azure.durable_functions.models.utils import http_utils

from adapters import durable_client
from adapters.clock import ManualClock
from adapters.durable_client import bounded_client
from contracts.names import AGENT_REPLIES_QUEUE
from localrun.durable.engine import DurableEngine
from localrun.durable.extension_api.handlers import Answer
from orchestrators.names import SCHEDULER
from orchestrators.starter import start_orchestrations
from order_agents.reply_relay import relay_reply
from tests.agents.support import START, StartClaim, make_context
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.localrun.real_durable_client import RealDurableClient
from tests.notifications.courier_clients import courier_client

SDK_TIMEOUT = 2.0  # the SDK session's total timeout (240 s in the SDK)
BOUND = 1.0  # DURABLE_CALL_TIMEOUT for the test
STALL = 6.0  # how long the extension holds the relayed reply's raise

REPLY = {
    "type": "AgentReply",
    "schemaVersion": 1,
    "requestId": "o-relay:1:charge-payment:payment",
    "instanceId": "o-relay:1",
    "orderId": "o-relay",
    "step": "charge-payment",
    "outcome": "succeeded",
}


@pytest.fixture
def durable(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DurableEngine, RealDurableClient]]:
    monkeypatch.setattr(durable_client, "DURABLE_CALL_TIMEOUT", timedelta(seconds=BOUND))
    with courier_client(SCHEDULER) as (engine, real):

        async def sdk_session() -> None:  # the SDK's session, as _get_session makes it, but for its timeout
            await http_utils._close_session()
            http_utils._client_session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=SDK_TIMEOUT, sock_connect=10, sock_read=None),
                connector=aiohttp.TCPConnector(limit=30, limit_per_host=30, enable_cleanup_closed=True),
            )

        real.run(sdk_session())
        yield engine, real


def test_a_raise_held_past_the_sdks_timeout_does_not_fail_another_orders_start(durable) -> None:
    engine, real = durable
    raise_ended = threading.Event()  # the relay moved on from its raise: it reads the status next
    let_go = threading.Event()

    def extension(method: str, path: str) -> Answer | None:
        if "/raiseEvent/" in path:
            let_go.wait(STALL)
        elif method == "GET":
            raise_ended.set()
        elif "/orchestrators/" in path:  # the start: answered once the raise has ended, one way or the other
            raise_ended.wait(STALL)
        return None

    real.api.before_answer = extension
    client = bounded_client(real.client)
    sender = RecordingSender()
    ctx = make_context(ManualClock(START), sender=sender)

    async def both() -> tuple[Any, list[str]]:
        relayed = asyncio.ensure_future(relay_reply(client, FakeReceivedMessage.of(json.dumps(REPLY)), ctx))
        await asyncio.sleep(BOUND / 2)  # the start goes out while the raise is held
        started = await start_orchestrations(
            client, SCHEDULER, [StartClaim("o-start", "o-start:1")], timedelta(seconds=60)
        )
        return await relayed, started

    try:
        settlement, started = real.run(both())
    finally:
        let_go.set()

    assert settlement.kind == "complete", settlement  # the raise's fate is unknown: relayed again later, a copy
    assert len(sender.message_ids(AGENT_REPLIES_QUEUE)) == 1
    assert started == ["o-start:1"], started
    assert engine.instance("o-start:1") is not None


# The ops API's functions bound each call themselves (``operations.instances``, ``operations.review_answer``), the
# order page's reads together.
BOUNDED_BY_THE_OPS_API = {"ops_order", "ops_review"}


def test_every_trigger_with_a_durable_client_bounds_its_calls() -> None:
    """Each function with a ``durableClient`` binding hands it on only through ``bounded_client``."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    unbounded: list[str] = []
    for path in sorted(root.glob("*/blueprint.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) or node.name in BOUNDED_BY_THE_OPS_API:
                continue
            if not any("durable_client_input" in ast.unparse(d) for d in node.decorator_list):
                continue
            wrapped = {
                id(arg)
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and ast.unparse(call.func) == "bounded_client"
                for arg in call.args
            }
            uses = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == "client"]
            if not uses or any(id(n) not in wrapped for n in uses):
                unbounded.append(f"{path.parent.name}.{node.name}")
    assert unbounded == []


def test_a_stalled_extension_holds_a_run_of_starts_about_its_budget_not_claims_x_bound(durable) -> None:
    """Measured at the runner's HTTP edge: the starter's starts, one after the other, took 12 x the bound with every
    start held (12 s here; 50 x 20 s = 1,000 s for a full batch on Azure). Now they run ``PARALLEL_CALLS`` at a time
    and none begins that could end past the start grace: one wave here; the others are left for the supervisor, as a
    failed start is, and the SDK's session lives on (a start after the stall is carried out)."""
    engine, real = durable
    let_go = threading.Event()

    def extension(method: str, path: str) -> Answer | None:
        if "/orchestrators/" in path:
            let_go.wait(STALL * 3)
        return None

    real.api.before_answer = extension
    client = bounded_client(real.client)
    claims = [StartClaim(f"o{i}", f"o{i}:1") for i in range(12)]

    async def timed() -> tuple[list[str], float]:
        loop = asyncio.get_running_loop()
        began = loop.time()
        started = await start_orchestrations(client, SCHEDULER, claims, timedelta(seconds=BOUND))
        return started, loop.time() - began

    try:
        started, took = real.run(timed())
    finally:
        let_go.set()
    real.api.before_answer = lambda method, path: None

    assert started == [] and took < 2 * BOUND, took  # one wave of bounded starts, given up: 12 x BOUND before
    after = real.run(
        start_orchestrations(client, SCHEDULER, [StartClaim("o-after", "o-after:1")], timedelta(seconds=60))
    )
    assert after == ["o-after:1"] and engine.instance("o-after:1") is not None
