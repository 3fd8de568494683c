"""Red team: ``AgentRequest`` (an agent's request queue) and ``AgentReply`` (``agent-replies``) bodies mutated field
by field (fixed families and a seeded ``random`` mix), through the handlers the triggers call, with the production
remote adapter (``HttpRemoteService``) over a local endpoint. The rule: every message is settled (completed, or
dead-lettered with a carriable reason and description), no exception escapes, and every reply sent is one the
reply relay reads."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.remote.http_service import HttpRemoteService
from contracts.messages import AgentReply
from contracts.names import AGENT_REPLIES_QUEUE
from contracts.parsing import parse
from domain.text import carriable
from domain.workflow import agent
from order_agents.reply_relay import relay_reply
from order_agents.service_bus_agent import handle_agent_request
from tests.agents.support import make_context
from tests.contexts import context_with
from tests.fakes import FakeReceivedMessage
from tests.submission.test_redteam_generative_intake import TEXTS, WRONG_TYPES

pytestmark = pytest.mark.cosmos

NOW = "2026-01-01T00:00:00Z"
TIMESTAMPS: list[Any] = [
    "2026-01-01T00:05:00Z",
    "2026-01-01T00:05:00+00:00",
    "2026-01-01T01:05:00+01:00",
    "2025-12-31T23:05:00-01:00",
    "2026-01-01T00:05:00+14:00",
    "2026-01-01T00:05:00-23:59",
    "2026-01-01T00:05:00+24:00",
    "2026-01-01T00:05:00",
    "2026-01-01",
    "2026-01-01T00:05Z",
    "2026-01-01 00:05:00Z",
    "20260101T000500Z",
    "2026-W01-4T00:05:00Z",
    "2026-001T00:05:00Z",
    "2026-01-01T00:05:00.123456789Z",
    "2026-01-01T00:05:00,5Z",
    "2026-01-01T23:59:60Z",
    "2026-02-30T00:00:00Z",
    "0999-12-31T23:59:59Z",
    "1000-01-01T00:00:00Z",
    "9998-12-31T23:59:59Z",
    "9999-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z",
    "+002026-01-01T00:05:00Z",
    "2026-01-01T00:05:00z",
    "2026-01-01t00:05:00Z",
    "2026-01-01T00:05:00\u200bZ",
    "\u0662\u0660\u0662\u0666-01-01T00:05:00Z",  # Arabic-Indic digits
    1767225900,
    1767225900.5,
]


def _request(**overrides: Any) -> dict[str, Any]:
    body = {
        "type": "AgentRequest",
        "schemaVersion": 1,
        "requestId": "ord-a1:1:charge-payment:payment",
        "instanceId": "ord-a1:1",
        "orderId": "ord-a1",
        "step": "charge-payment",
        "action": "do",
        "attempt": 1,
        "deadline": "2026-01-01T00:05:00Z",
        "idempotencyKey": "ord-a1:charge-payment",
        "payload": {"amountCents": 100},
    }
    body.update(overrides)
    return body


def _reply(**overrides: Any) -> dict[str, Any]:
    body = {
        "type": "AgentReply",
        "schemaVersion": 1,
        "requestId": "ord-a1:1:charge-payment:payment",
        "instanceId": "ord-a1:1",
        "orderId": "ord-a1",
        "step": "charge-payment",
        "outcome": "succeeded",
        "result": {"chargeId": "c-1"},
    }
    body.update(overrides)
    return body


INSTANCES = ["ord-a1:0", "ord-a1:01", "ord-a1:1000000000", "ord-a1:compensate:1", "ord-b1:1", "ord-a1:1:x", "ORD-A1:1"]
PAYLOADS: list[Any] = [
    {"n": 2**64},
    {"n": -(10**4000)},
    {"n": 1e308},
    {"n": -0.0},
    {"": 1},
    {"a" * 1000: 1},
    {"\udc80": "\udc80"},
    {"a": [[[[[[[[[[1]]]]]]]]]]},
    {"a": "x" * 60_000},
]


def _values(field: str) -> list[Any]:
    if field == "deadline":
        return [*WRONG_TYPES, *TIMESTAMPS]
    if field in ("instanceId",):
        return [*WRONG_TYPES, *INSTANCES]
    if field in ("payload", "result"):
        return [*WRONG_TYPES, *PAYLOADS]
    if field == "attempt":
        return [*WRONG_TYPES, 0, 2, 999_999_999, 10**9, 2**63, 1.0, "1"]
    if field in ("outcome",):
        return [*WRONG_TYPES, "failed", "Succeeded", "ok"]
    if field in ("step",):
        return [*WRONG_TYPES, "reserve-inventory", "arrange-shipment", "Charge-Payment", "charge-payment\n"]
    if field == "action":
        return [*WRONG_TYPES, *TEXTS, "undo", "capture", "UNDO"]
    return [*WRONG_TYPES, *TEXTS]


def _cases(build: Any, extra: dict[str, list[Any]]) -> Iterator[tuple[str, Any]]:
    base = build()
    for field in [f for f in base if f != "type"] + list(extra):
        yield f"without {field}", {k: v for k, v in base.items() if k != field}
        for n, value in enumerate([*_values(field), *extra.get(field, [])]):
            yield f"{field}#{n}", {**base, field: value}
    rng = random.Random(4122026)
    fields = [f for f in base if f != "type"]
    for n in range(60):
        body = dict(base)
        for field in rng.sample(fields, k=rng.randint(1, 3)):
            body[field] = rng.choice(_values(field))
        yield f"random#{n}", body


REQUEST_CASES = list(_cases(_request, {}))
REPLY_CASES = list(_cases(_reply, {"transient": [1, "true"], "error": [None, *TEXTS], "dependencyOpen": [1]}))


def _raw(body: Any) -> bytes:
    return json.dumps(body).encode()


def _carriable(text: Any) -> bool:
    return isinstance(text, str) and text.strip() != "" and carriable(text) == text


@pytest.fixture
def endpoint() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = b'{"chargeId": "c-1"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_every_mutated_agent_request_is_settled_and_its_reply_is_readable(app_context, sender, endpoint):
    clock = ManualClock()
    clock.set(parse_time(NOW))
    ctx = context_with(
        app_context, clock=clock, remote={agent("payment").service: HttpRemoteService(endpoint, timeout_seconds=2)}
    )
    problems = []
    for name, body in REQUEST_CASES:
        before = len(sender.sent)
        try:
            settled = handle_agent_request(ctx, "payment", FakeReceivedMessage.of(_raw(body)))
        except Exception as exc:
            problems.append(f"{name}: raised {type(exc).__name__}: {exc}"[:300])
            continue
        if (problem := _settlement_problem(name, settled)) is not None:
            problems.append(problem)
        for queue, sent in sender.sent[before:]:
            assert queue == AGENT_REPLIES_QUEUE
            try:
                parse(sent.body, {"AgentReply": AgentReply})
            except Exception as exc:
                problems.append(f"{name}: its reply is unreadable: {exc}"[:300])
    assert not problems, f"{len(problems)} of {len(REQUEST_CASES)}:\n" + "\n".join(problems)


def parse_time(text: str) -> Any:
    from domain.timefmt import parse as parse_utc

    return parse_utc(text)


class _Client:
    def __init__(self) -> None:
        self.raised: list[tuple[str, str, Any]] = []

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None:
        json.dumps(event_data)  # what the SDK sends
        self.raised.append((instance_id, event_name, event_data))

    async def get_status(self, instance_id: str) -> Any:
        return None


def _settlement_problem(name: str, settled: Any) -> str | None:
    """What is wrong with how a mutated message was settled: abandoned (a redelivery loop), or dead-lettered with a
    reason or description the dead-letter queue cannot carry; None when it was settled as it should be."""
    if settled.kind == "abandon":
        return f"{name}: abandoned ({settled})"[:300]
    if settled.kind == "deadletter" and not (_carriable(settled.reason) and _carriable(settled.description)):
        return f"{name}: dead-letter text not carriable: {settled}"[:300]
    return None


def test_every_mutated_agent_reply_is_settled_by_the_relay():
    problems = []
    for name, body in REPLY_CASES:
        client = _Client()
        try:
            settled = asyncio.run(relay_reply(client, FakeReceivedMessage.of(_raw(body)), make_context(ManualClock())))
        except Exception as exc:
            problems.append(f"{name}: raised {type(exc).__name__}: {exc}"[:300])
            continue
        if (problem := _settlement_problem(name, settled)) is not None:
            problems.append(problem)
    assert not problems, f"{len(problems)} of {len(REPLY_CASES)}:\n" + "\n".join(problems)
