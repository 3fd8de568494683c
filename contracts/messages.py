"""Message contracts. Every body is a JSON object with ``type`` and ``schemaVersion``.

Models forbid unknown fields: a typo in a field name is an error the sender hears about (through
the dead-letter queue), not a value silently ignored. A new field means a new ``schemaVersion``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, StringConstraints
from pydantic.alias_generators import to_camel

from domain.ids import ORDER_ID_PATTERN
from domain.timefmt import parse, to_text


def _utc(value: object) -> object:
    """A text or datetime as its UTC moment; anything else is left to pydantic's datetime rules."""
    return parse(value) if isinstance(value, str | datetime) else value


# A timestamp in a message: read as UTC (an offset or ``Z`` required), written as ``timefmt.to_text``.
UtcDateTime = Annotated[datetime, BeforeValidator(_utc), PlainSerializer(to_text, return_type=str)]

OrderId = Annotated[str, StringConstraints(pattern=ORDER_ID_PATTERN)]
QueueName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,259}$")]
Sku = Annotated[str, StringConstraints(pattern=r"^[A-Z0-9][A-Z0-9-]{0,31}$")]
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class Contract(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid", strict=False
    )

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


class OrderLine(Contract):
    sku: Sku
    quantity: int = Field(ge=1, le=1000, strict=True)
    unit_price_cents: int = Field(ge=0, le=10_000_000, strict=True)


class OrderSubmitted(Contract):
    type: Literal["OrderSubmitted"]
    schema_version: Literal[1]
    order_id: OrderId
    customer_id: ShortText
    lines: list[OrderLine] = Field(min_length=1, max_length=100)
    currency: Currency
    ship_to: ShortText
    reply_to: QueueName | None = None
    prepaid: bool = False

    @property
    def total_cents(self) -> int:
        return sum(line.quantity * line.unit_price_cents for line in self.lines)

    def order_document(self) -> dict[str, Any]:
        """The immutable order, as stored in the ``orders`` container."""
        body = self.model_dump(mode="json", by_alias=True, exclude={"type", "schema_version"})
        return {"id": self.order_id, **body, "totalCents": self.total_cents, "schemaVersion": 1}


class PaymentNotification(Contract):
    """A payment provider says an order was paid (prepaid orders). May arrive before its order."""

    type: Literal["PaymentNotification"]
    schema_version: Literal[1]
    notification_id: ShortText
    order_id: OrderId
    amount_cents: int = Field(ge=0, strict=True)
    currency: Currency
    provider_reference: ShortText


class RetryDeferred(Contract):
    """Scheduled by this app to itself on ``orders``: try again to apply the deferred message with this
    sequence number (a dependency of applying it was unavailable). ``round`` counts the tries so far."""

    type: Literal["RetryDeferred"]
    schema_version: Literal[1]
    sequence_number: int = Field(ge=0, strict=True)
    order_id: OrderId
    message_id: ShortText
    round: int = Field(ge=1, le=1000, strict=True)


class CancelOrder(Contract):
    type: Literal["CancelOrder"]
    schema_version: Literal[1]
    order_id: OrderId
    reason: ShortText


class AgentRequest(Contract):
    type: Literal["AgentRequest"] = "AgentRequest"
    schema_version: Literal[1] = 1
    request_id: ShortText
    instance_id: ShortText
    order_id: OrderId
    step: ShortText
    action: ShortText = "do"
    attempt: int = Field(ge=1)
    deadline: UtcDateTime
    idempotency_key: ShortText
    payload: dict[str, Any]

    def activity_json(self) -> dict[str, Any]:
        """The request as the orchestrations hand it to activities (``begin_step``, ``send_agent_request``,
        an in-process agent): the body without ``type`` and ``schemaVersion``, which the agent's copy
        on the queue carries (``to_json``). Recorded in orchestration histories: keep it stable."""
        return self.model_dump(mode="json", by_alias=True, exclude={"type", "schema_version"})


class AgentReply(Contract):
    type: Literal["AgentReply"] = "AgentReply"
    schema_version: Literal[1] = 1
    request_id: ShortText
    instance_id: ShortText
    order_id: OrderId
    step: ShortText
    outcome: Literal["succeeded", "failed"]
    transient: bool = False
    result: dict[str, Any] | None = None
    error: str | None = None
    # A transient failure without a call: the service's circuit was open (dependency health).
    dependency_open: bool = False


StatusName = Literal[
    "Received",
    "Processing",
    "Completed",
    "Failed",
    "Compensating",
    "Compensated",
    "CompensationFailed",
    "Rejected",
    "CancellationRejected",
]


class StatusUpdate(Contract):
    type: Literal["StatusUpdate"] = "StatusUpdate"
    schema_version: Literal[1] = 1
    order_id: OrderId
    status: StatusName
    attempt: int = Field(ge=0)
    at: UtcDateTime
    reason: str | None = None


class OperatorAlert(Contract):
    type: Literal["OperatorAlert"] = "OperatorAlert"
    schema_version: Literal[1] = 1
    alert_id: ShortText
    kind: ShortText
    severity: Literal["warning", "error", "critical"]
    order_id: str | None = None
    summary: ShortText
    details: dict[str, Any] = Field(default_factory=dict)
    at: UtcDateTime


# Messages that may arrive on the ``orders`` queue, by ``type``.
ORDERS_QUEUE_TYPES: dict[str, type[Contract]] = {
    "OrderSubmitted": OrderSubmitted,
    "PaymentNotification": PaymentNotification,
    "CancelOrder": CancelOrder,
    "RetryDeferred": RetryDeferred,
}
