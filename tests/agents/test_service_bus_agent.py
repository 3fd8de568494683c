"""The Service Bus agents, called through their registered functions (``agent_payment``,
``agent_shipping``) with a simulated remote service, a recording sender and recording settlement."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import Ledger
from contracts.messages import AgentReply
from contracts.names import AGENT_REPLIES_QUEUE, SERVICE_BUS_CONNECTION
from dependencies import AppContext, use_context
from domain.compensation import undo_idempotency_key
from domain.workflow import request_queues
from tests.agents.support import START, make_context, make_request
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingSender


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def sender() -> RecordingSender:
    return RecordingSender()


@pytest.fixture
def context(clock, ledger, sender) -> Iterator[AppContext]:
    ctx = make_context(clock, sender=sender, ledger=ledger)
    use_context(ctx)
    yield ctx
    use_context(None)


@pytest.fixture
def deliver(functions) -> Callable[[str, Any], RecordingActions]:
    """Delivers a body to a registered agent trigger, as the host does; returns the settlement."""

    def to(function_name: str, body: Any) -> RecordingActions:
        actions = RecordingActions()
        functions[function_name].func(message=FakeReceivedMessage.of(body), message_actions=actions)
        return actions

    return to


def replies(sender: RecordingSender) -> list[AgentReply]:
    return [AgentReply.model_validate(b) for b in sender.bodies(AGENT_REPLIES_QUEUE)]


@pytest.mark.parametrize(
    ("name", "queue"), [("agent_payment", "payment-requests"), ("agent_shipping", "shipping-requests")]
)
def test_each_request_queue_has_a_manually_settled_trigger(functions, name, queue):
    [trigger] = list(functions[name].bindings)
    assert trigger["type"] == "serviceBusTrigger"
    assert trigger["queueName"] == queue
    assert trigger["connection"] == SERVICE_BUS_CONNECTION
    assert trigger["autoCompleteMessages"] is False


def test_every_request_queue_of_the_workflow_has_its_agent_trigger(functions):
    for agent_name, queue in request_queues().items():
        bindings = list(functions[f"agent_{agent_name}"].bindings)
        assert [b["queueName"] for b in bindings] == [queue]


def test_a_request_is_run_replied_to_and_completed(context, sender, ledger, deliver):
    request = make_request()
    actions = deliver("agent_payment", request.to_json())
    assert actions.only == ("complete", {})
    [(queue, message)] = sender.sent
    assert queue == AGENT_REPLIES_QUEUE
    assert message.message_id == f"{request.request_id}:reply"
    [reply] = replies(sender)
    assert (reply.request_id, reply.instance_id, reply.outcome) == (
        request.request_id,
        request.instance_id,
        "succeeded",
    )
    [charge] = ledger.effects("order-1", "charge")
    assert reply.result == {"chargeId": charge.reference, "amountCents": 4200}


def test_a_redelivered_request_replies_the_same_and_charges_once(context, sender, ledger, deliver):
    request = make_request()
    deliver("agent_payment", request.to_json())
    deliver("agent_payment", request.to_json())
    first, second = replies(sender)
    assert first == second
    assert sender.message_ids(AGENT_REPLIES_QUEUE) == [f"{request.request_id}:reply"] * 2  # duplicate detection
    assert ledger.net("order-1").charged_cents == 4200


def test_a_supervisor_retry_of_the_step_reuses_the_key_and_does_not_charge_again(context, sender, ledger, deliver):
    deliver("agent_payment", make_request(attempt=1).to_json())
    deliver("agent_payment", make_request(attempt=2).to_json())
    first, second = replies(sender)
    assert first.request_id != second.request_id
    assert first.result == second.result
    assert len(ledger.effects("order-1", "charge")) == 1


def test_a_stale_attempt_gets_a_permanent_error_reply(context, sender, ledger, deliver):
    deliver("agent_payment", make_request(attempt=2).to_json())
    actions = deliver("agent_payment", make_request(attempt=1).to_json())
    assert actions.only == ("complete", {})
    stale = replies(sender)[-1]
    assert (stale.outcome, stale.transient) == ("failed", False)
    assert "stale fencing token" in (stale.error or "")
    assert len(ledger.effects("order-1")) == 1


def test_a_request_past_its_deadline_is_completed_without_a_call_or_reply(context, clock, sender, ledger, deliver):
    clock.advance(timedelta(minutes=5))
    actions = deliver("agent_payment", make_request().to_json())
    assert actions.only == ("complete", {})
    assert sender.sent == []
    assert ledger.effects() == []


def test_a_reply_that_cannot_be_sent_abandons_and_the_redelivery_charges_once(context, sender, ledger, deliver):
    sender.missing = {AGENT_REPLIES_QUEUE}
    request = make_request()
    assert deliver("agent_payment", request.to_json()).only[0] == "abandon"
    sender.missing = set()
    assert deliver("agent_payment", request.to_json()).only == ("complete", {})
    [reply] = replies(sender)
    assert reply.outcome == "succeeded"
    assert len(ledger.effects("order-1", "charge")) == 1


def test_a_permanent_service_failure_is_an_error_reply(clock, sender, deliver):
    use_context(make_context(clock, sender=sender, configs={"shipping": SimulatorConfig(permanent_error_rate=1.0)}))
    try:
        actions = deliver("agent_shipping", make_request("arrange-shipment").to_json())
    finally:
        use_context(None)
    assert actions.only == ("complete", {})
    [reply] = replies(sender)
    assert (reply.step, reply.outcome, reply.transient) == ("arrange-shipment", "failed", False)


def test_an_outage_longer_than_the_deadline_allows_is_a_transient_error_reply(clock, sender, deliver):
    outage = SimulatorConfig.from_profile({"outages": [{"start_s": 0, "duration_s": 3600}]}, origin=START)
    use_context(make_context(clock, sender=sender, configs={"payment": outage}))
    try:
        deliver("agent_payment", make_request(deadline=START + timedelta(seconds=20)).to_json())
    finally:
        use_context(None)
    [reply] = replies(sender)
    assert (reply.outcome, reply.transient) == ("failed", True)
    assert "outage" in (reply.error or "")
    assert clock.now() < START + timedelta(seconds=20)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "NotJson"),
        ({"type": "AgentRequest", "schemaVersion": 1}, "InvalidFields"),
        ({"type": "OrderSubmitted", "schemaVersion": 1}, "UnknownType"),
        ({"type": "Hello", "schemaVersion": 1}, "UnknownType"),
        ({**make_request().model_dump(mode="json", by_alias=True), "schemaVersion": 2}, "UnsupportedSchemaVersion"),
        ({**make_request().model_dump(mode="json", by_alias=True), "attempt": 0}, "InvalidFields"),
        ({**make_request().model_dump(mode="json", by_alias=True), "step": "gift-wrap"}, "UnknownStep"),
        (make_request("arrange-shipment").model_dump(mode="json", by_alias=True), "WrongAgent"),
    ],
)
def test_a_bad_request_is_dead_lettered_with_a_reason(context, sender, ledger, body, reason, deliver):
    kind, details = deliver("agent_payment", body).only
    assert kind == "deadletter"
    assert details["reason"] == reason
    assert details["description"]
    assert sender.sent == []
    assert ledger.effects() == []


# Red team (hostile62): tests/agents/test_redteam62_foreign_ids.py tells the story.
def _body(**changes: Any) -> dict[str, Any]:
    return {**make_request().model_dump(mode="json", by_alias=True), **changes}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"requestId": "order-1:2:charge-payment:payment"}, "requestId"),  # another attempt's request
        ({"requestId": "order-2:1:charge-payment:payment"}, "requestId"),  # another order's
        ({"requestId": "order-1:1:reserve-inventory:inventory"}, "requestId"),  # another step's
        ({"requestId": "r-1"}, "requestId"),
        ({"idempotencyKey": "order-2:charge-payment"}, "idempotencyKey"),  # another order's charge
        ({"idempotencyKey": "order-1:reserve-inventory"}, "idempotencyKey"),
        ({"attempt": 999_999_999}, "attempt"),  # a fencing token above every later attempt's
        ({"attempt": 2}, "attempt"),
    ],
)
def test_a_request_naming_another_request_or_key_is_dead_lettered_uncalled(
    context: Any, sender: Any, ledger: Any, deliver: Any, changes: dict[str, Any], field: str
) -> None:
    kind, details = deliver("agent_payment", _body(**changes)).only
    assert (kind, details["reason"]) == ("deadletter", "InvalidFields")  # before: run, the service called
    assert f"field '{field}'" in details["description"]
    assert ledger.effects() == [] and sender.sent == []


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"requestId": "order-1:1:charge-payment:payment:2"},  # a retry's (fallback, review)
        {"action": "undo", "idempotencyKey": undo_idempotency_key("order-1", "charge-payment")},
    ],
)
def test_the_apps_own_ids_are_run(context: Any, sender: Any, deliver: Any, changes: dict[str, Any]) -> None:
    kind, _ = deliver("agent_payment", _body(**changes)).only
    assert kind == "complete"
    assert len(sender.sent) == 1


# Session 63: an agent request's identifiers are one line. A line break in one forged log lines (CWE-117) and passed
# ``foreign_ids`` (a requestId with the instance's step prefix and a line break after it): the service was called.
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"requestId": "order-1:1:charge-payment:payment\nFAKE: order-1 refunded"}, "requestId"),
        ({"requestId": "order-1:1:charge-payment:payment\t2"}, "requestId"),
        ({"step": "charge-payment\r\n", "requestId": "order-1:1:charge-payment\r\n:payment"}, "step"),
        ({"action": "do\u2028"}, "action"),
    ],
)
def test_a_request_whose_identifier_has_a_line_break_is_dead_lettered_uncalled(
    context: Any, sender: Any, ledger: Any, deliver: Any, changes: dict[str, Any], field: str
) -> None:
    kind, details = deliver("agent_payment", _body(**changes)).only
    assert (kind, details["reason"]) == ("deadletter", "InvalidFields")
    assert f"field '{field}'" in details["description"] and "one line" in details["description"], details
    assert ledger.effects() == [] and sender.sent == []
