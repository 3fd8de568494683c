"""An ``orders`` message whose body is an AMQP value section (not data: another AMQP client can send one) is
dead-lettered ``NotJson`` at its first delivery, as ``body_bytes`` says.

Red team (rt-dlwatch): the intake's ``DeadLettered`` event read the order the body names with ``body_bytes`` again,
inside the handler of the ``InvalidMessage`` that very call raised, so the same error escaped it: the message failed
every delivery until the broker dead-lettered it (``MaxDeliveryCountExceeded``), no ``DeadLettered`` event logged."""

from __future__ import annotations

import logging
from typing import Any

from submission.intake import handle_orders_message
from tests.fakes import sdk_value_body_message


def test_a_value_body_is_dead_lettered_not_json_at_once(caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    message = sdk_value_body_message(5, {"orderId": "ord-1", "type": "OrderSubmitted"})
    result = handle_orders_message(None, message)  # type: ignore[arg-type]  # refused before any store is used
    assert (result.settlement.kind, result.settlement.reason) == ("deadletter", "NotJson")
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "DeadLettered"]
    assert (event.reason, event.orderId) == ("NotJson", None)
