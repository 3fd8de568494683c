"""The reply relay while the Durable extension answers 500 (its storage failing: ``HttpApiHandler`` answers an
unexpected exception with a 500 and an error object). The relay's ``raise_event`` fails without saying the
instance is gone, and its ``get_status`` of the same instance answers 500 too, which the SDK turns into an empty,
falsy status (it accepts 500 as "failed with an unhandled exception" and reads the error object as a status), the
same as for an unknown instance. The relay took that for a late reply to an unknown instance and completed the
message: the reply was dropped while the attempt still ran and waited for it (until its step deadline, then a whole
retry). Only the raise's own 404/410, or a finished status, says the instance is gone; anything else is relayed
again: it was abandoned and redelivered at once, five deliveries burnt in a blip and the reply dead-lettered
``MaxDeliveryCountExceeded`` (a page); now it is sent to ``agent-replies`` again as a copy for a later round and
completed (``order_agents.reply_relay``). The 500s come from the runner's HTTP edge
(``DurableExtensionApi.before_answer``), below the real client."""

from __future__ import annotations

import json
from typing import Any

from adapters.clock import ManualClock
from contracts.names import AGENT_REPLIES_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from localrun.durable.extension_api.handlers import Answer, json_answer
from order_agents.reply_relay import relay_reply
from tests.agents.support import START, make_context
from tests.fakes import FakeReceivedMessage, RecordingSender
from tests.notifications.courier_clients import courier_client

ORDER = "o-relay"
REPLY = {
    "type": "AgentReply",
    "schemaVersion": 1,
    "requestId": "o-relay:1:charge-payment:payment",
    "instanceId": f"{ORDER}:1",
    "orderId": ORDER,
    "step": "charge-payment",
    "outcome": "succeeded",
}
ERROR = {"Message": "Something went wrong while processing your request", "ExceptionMessage": "storage timeout"}


def _relay_while(answer: Answer, *, raise_too: bool = True, sender: RecordingSender | None = None) -> Any:
    ctx = make_context(ManualClock(START), sender=sender)
    with courier_client("process_order_v3") as (_engine, real):
        seen: list[str] = []

        def fail(method: str, path: str) -> Answer | None:
            seen.append(f"{method} {path.split('?', maxsplit=1)[0]}")
            return answer if raise_too or method == "GET" else None

        real.api.before_answer = fail
        settlement = real.run(relay_reply(real.client, FakeReceivedMessage.of(json.dumps(REPLY)), ctx))
        return settlement, seen


def test_a_reply_is_relayed_again_later_when_the_extension_answers_500_to_the_raise_and_the_status() -> None:
    sender = RecordingSender()
    settlement, seen = _relay_while(json_answer(500, ERROR), sender=sender)

    assert [call.split(" ")[0] for call in seen] == ["POST", "GET"], seen
    assert settlement.kind == "complete", settlement  # not dropped: its copy is due in a second
    [(queue, copy)] = sender.sent
    assert (queue, copy.application_properties[ROUND_PROPERTY]) == (AGENT_REPLIES_QUEUE, 1)
    assert json.loads(copy.body) == REPLY


def test_a_reply_to_an_unknown_instance_is_still_completed() -> None:
    settlement, seen = _relay_while(json_answer(500, ERROR), raise_too=False)  # the raise answers 404

    assert settlement.kind == "complete", (settlement, seen)


def test_the_sdk_reads_a_500_status_as_an_unknown_instance() -> None:
    """Why the status alone cannot tell: ``get_status`` answers a falsy status for a 500, as for a 404."""
    with courier_client("process_order_v3") as (_engine, real):
        real.api.before_answer = lambda method, path: json_answer(500, ERROR)
        status = real.run(real.client.get_status(f"{ORDER}:1"))
    assert not status and status.runtime_status is None
