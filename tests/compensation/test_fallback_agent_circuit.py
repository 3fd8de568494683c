"""A fallback agent calls its own provider, so its own circuit guards the call: the primary's outage
does not refuse it, and its failures count against its provider, not the primary's. (Before, the
step's agent named the circuit: with the primary open the backup refused every call, including the
refunds of compensation, and the supervisor, reading the backup's closed circuit, counted the rounds:
an order ended ``CompensationFailed`` for an outage alone.)"""

from __future__ import annotations

from typing import Any

from adapters.cosmos.health_store import read_health
from adapters.remote.interface import RemoteCall, RemoteError
from dependencies import AppContext
from domain.circuit import CircuitState
from domain.ids import idempotency_key, request_id
from domain.payloads import step_payload
from domain.timefmt import to_text
from order_agents.circuit_gate import gate_of
from tests.compensation.support import ORDER, call_agent
from tests.contexts import context_with

FORWARD = "o1:1"


def charge_request(ctx: AppContext, agent_name: str) -> dict[str, Any]:
    return {
        "requestId": request_id(FORWARD, "charge-payment", agent_name) + ":1",
        "instanceId": FORWARD,
        "orderId": "o1",
        "step": "charge-payment",
        "action": "do",
        "attempt": 1,
        "deadline": to_text(ctx.clock.now() + ctx.settings.step_timeout),
        "idempotencyKey": idempotency_key("o1", "charge-payment"),
        "payload": step_payload("charge-payment", ORDER, {}),
    }


def test_the_backup_provider_is_called_while_the_primarys_circuit_is_open(ctx: AppContext, ledger: Any) -> None:
    gate = gate_of(ctx)
    for _ in range(ctx.settings.circuit_failure_threshold):
        gate.failed("payment")
    assert read_health(ctx.health, "payment", ctx.clock.now()).state is CircuitState.OPEN

    refused = call_agent(ctx, "payment", charge_request(ctx, "payment"))
    assert refused is not None and refused["dependencyOpen"]
    taken = call_agent(ctx, "payment-backup", charge_request(ctx, "payment-backup"))
    assert taken is not None and taken["outcome"] == "succeeded", taken
    assert ledger.net("o1").charged_cents > 0


def test_the_backup_providers_failures_count_against_its_own_circuit(ctx: AppContext) -> None:
    class Down:
        def call(self, call: RemoteCall) -> dict[str, Any]:
            raise RemoteError(f"{call.service} is unavailable", transient=True)

    down = context_with(ctx, remote={**ctx.remote, "payment_backup": Down()})
    reply = call_agent(down, "payment-backup", charge_request(down, "payment-backup"))
    assert reply is not None and reply["outcome"] == "failed" and reply["transient"]
    assert read_health(ctx.health, "payment_backup", ctx.clock.now()).consecutive_failures > 0
    assert read_health(ctx.health, "payment", ctx.clock.now()).consecutive_failures == 0
