"""Payment notifications deferred for an order that has not come, and the operator alerts naming them (the peek
sweep's ``PaymentWithoutOrder``, ``deferral/sweep.py``): the run goes on until each is told (``simulation``), and
the report counts one left untold as stranded (``report``). Read from the broker, not from the app's logs."""

from __future__ import annotations

import json
from collections.abc import Container, Mapping
from typing import Any

from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from contracts.parsing import named_order_id
from contracts.store_retry import is_copy
from deferral.sweep import ORDERLESS_ALERT
from localrun.servicebus import InProcessBroker
from localrun.servicebus.messages import MessageState
from submission.store_outage import original_id


def sent_as(message_id: str, properties: Mapping[Any, Any] | None) -> str:
    """The MessageId a message on ``orders`` was first sent under: an app's store-retry copy (its round property
    set, ``contracts.store_retry``) stands for its original; any other message only for itself, whatever its
    MessageId looks like (an injected line's ``ord-00001:store-retry:1`` is not a copy of ``ord-00001``)."""
    return original_id(message_id) if is_copy(properties) else message_id


def waiting_without_order(broker: InProcessBroker, known: Container[str]) -> dict[int, str]:
    """The messages deferred on ``orders`` whose order is not in ``known``: their order id by sequence number."""
    return {
        int(m.sequence_number): str(named_order_id(m.body))
        for m in broker.contents(ORDERS_QUEUE)
        if m.state is MessageState.DEFERRED and named_order_id(m.body) not in known
    }


def told(broker: InProcessBroker) -> set[int]:
    """The sequence numbers that a ``PaymentWithoutOrder`` alert on the alert queue names."""
    numbers: set[int] = set()
    for message in broker.contents(OPERATOR_ALERTS_QUEUE):
        try:
            alert = json.loads(message.body)
        except ValueError:
            continue
        details = alert.get("details") if isinstance(alert, dict) and alert.get("kind") == ORDERLESS_ALERT else None
        if isinstance(details, dict) and isinstance(details.get("sequenceNumber"), int):
            numbers.add(details["sequenceNumber"])
    return numbers


def told_message_ids(broker: InProcessBroker, known: Container[str]) -> set[str]:
    """The MessageIds (a store-retry copy's: its original's) of the messages waiting without their order that a
    ``PaymentWithoutOrder`` alert names."""
    alerted = told(broker)
    waiting = waiting_without_order(broker, known)
    return {
        sent_as(m.message_id, m.application_properties)
        for m in broker.contents(ORDERS_QUEUE)
        if int(m.sequence_number) in waiting and int(m.sequence_number) in alerted
    }
