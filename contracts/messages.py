"""Message contracts. Every body is a JSON object with ``type`` and ``schemaVersion``.

Models forbid unknown fields (every message from outside the app, on the ``orders`` queue): a typo in a
field name is an error the sender hears about (through the dead-letter queue), not a value silently
ignored. A new field means a new ``schemaVersion``.

The app's own messages to itself (``OwnMessage``: an agent's request and its reply, an operator alert the
alert courier sends as it was built) ignore a field they do not know instead: their writer may be a newer
version of the app than their reader (a rollback while they wait on their queue or in an orchestration's
history), and a new field the reader can ignore is added to the same ``schemaVersion``.
One the reader must not ignore comes with a new ``schemaVersion``, which an older reader refuses
(``UnsupportedSchemaVersion``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    model_validator,
)
from pydantic.alias_generators import to_camel

from contracts.names import APP_QUEUES, is_app_queue
from domain.ids import MAX_ATTEMPT, ORDER_ID_PATTERN, instance_number, instance_order_id
from domain.text import blank, carriable, has_line_break, one_line, uncarriable
from domain.timefmt import parse, to_text


def _utc(value: object) -> object:
    """A text or datetime as its UTC moment; anything else is refused. Before, anything else was left to pydantic's
    datetime rules, which read a JSON number as Unix seconds (or milliseconds): a moment without the offset the type
    requires, outside ``EARLIEST``..``LATEST`` (9999-12-31 from ``253402300799999``, year 1 from ``-62135596800000``),
    that ``to_text`` writes back as a text ``parse`` refuses (``1-01-01T...``, year 9999): an agent's reply to such a
    request dead-lettered by the relay for the deadline its own agent wrote."""
    if isinstance(value, str | datetime):
        return parse(value)
    raise ValueError("timestamp must be a text with a UTC offset or Z")


# A timestamp in a message: read as UTC (an offset or ``Z`` required), written as ``timefmt.to_text``.
UtcDateTime = Annotated[datetime, BeforeValidator(_utc), PlainSerializer(to_text, return_type=str)]

OrderId = Annotated[str, StringConstraints(pattern=ORDER_ID_PATTERN)]
QueueName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,259}$")]
Sku = Annotated[str, StringConstraints(pattern=r"^[A-Z0-9][A-Z0-9-]{0,31}$")]
Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]
# An agent's call carries its request's idempotency key as the ``Idempotency-Key`` HTTP header
# (adapters/remote/http_service.py): visible ASCII only. ``http.client`` refuses a line break (ValueError)
# or a character outside Latin-1 (UnicodeEncodeError) while it builds the request, and neither is a
# RemoteError: a request holding one failed its trigger on every delivery, until MaxDeliveryCountExceeded.
# The app's own keys (``<orderId>:<step>``, ``...:undo``) are always so.
HeaderText = Annotated[str, StringConstraints(pattern=r"^[\x21-\x7e]{1,200}$")]


def _client_text(value: str) -> str:
    why_not = uncarriable(value)
    if why_not is not None:
        raise ValueError(f"cannot be recorded: {why_not}")
    if blank(value):
        raise ValueError("must not be blank (nothing visible)")
    return value


# Text a client sends that the app records (the order document, the state record, its history) and logs:
# the operator API's rule for an operator's reason (domain/text.py): no lone surrogate, no control
# character but tabs and line breaks, no bidirectional override, not blank (something visible). Kept as
# sent (an address may have lines).
ClientText = Annotated[ShortText, AfterValidator(_client_text)]
# A client's reason, which goes on one line of the record's history and of the log, as an operator's does.
ClientReason = Annotated[ClientText, AfterValidator(one_line)]


def _one_line_id(value: str) -> str:
    if has_line_break(value):
        raise ValueError("an identifier is one line: it must not hold a tab or a line break")
    return value


# An identifier a client (or any sender on a queue the app reads) sends: ``ClientText`` on one line, refused when
# it holds a tab or a line break (not folded, as a reason is: folded, two ids would read as one). It goes into log
# lines, alert summaries and ids, the record's history and the ops API, where a line break forges a line (CWE-117)
# and splits one id into what looks like two.
Identifier = Annotated[ClientText, AfterValidator(_one_line_id)]


def _submitter_queue(value: str) -> str:
    if is_app_queue(value):  # compared case-insensitively, as Service Bus names are
        raise ValueError(f"{value!r} is one of this app's own queues ({', '.join(APP_QUEUES)}), not a submitter's")
    return value


# Where an order's statuses go: any queue of the namespace but the app's own.
ReplyQueue = Annotated[QueueName, AfterValidator(_submitter_queue)]
# Service Bus sequence numbers are signed 64-bit integers. Every typed integer field has its own bound
# (none past int64); free-form values (``payload``, ``result``, ``details``) keep any integer
# (contracts/parsing.py ``MAX_INT_DIGITS``).
INT64_MAX = 2**63 - 1


def _orchestration_instance(value: str) -> str:
    if instance_order_id(value) is None:
        raise ValueError(
            "not an orchestration instance of this app: expected <orderId>:<attempt> or <orderId>:compensate:<round>"
        )
    return value


# The orchestration instance an agent request comes from and its reply goes to (it reaches the Durable
# client's URLs): only an id the app builds (``domain.ids.instance_order_id``).
InstanceId = Annotated[str, AfterValidator(_orchestration_instance)]


def _instance_of_order(instance: str, order_id: str) -> None:
    owner = instance_order_id(instance)
    if owner != order_id:
        raise ValueError(f"field 'instanceId': instance {instance!r} is not one of order {order_id!r}")


def foreign_ids(message: AgentRequest | AgentReply) -> str | None:
    """What makes an agent request (or its reply) name another request than its own, or None: its ``requestId``
    must be one its instance builds for its step (``<instanceId>:<step>:<agent>...``: ``domain.ids.request_id``, a
    retry's and an undo's after it), a request's ``attempt`` its instance's number (the call's fencing token: a
    service refuses every call under the key with a token below the highest it saw, so a higher one stopped the
    order's later attempts) and its ``idempotencyKey`` its order's for that step (``domain.ids.idempotency_key``,
    or the undo's: ``domain.compensation.undo_idempotency_key``). Checked where
    one comes off a queue (the agents' triggers, the reply relay), not by the contract, which reads histories too.
    Before, a reply naming another attempt's request or another order's was raised to the instance, which skipped it
    unheard (no dead letter, no reason), and a request carrying another order's key had the service answer that
    order's call (its charge) as this one's."""
    if not message.request_id.startswith(f"{message.instance_id}:{message.step}:"):
        return (
            f"field 'requestId': request {message.request_id!r} is not one of instance {message.instance_id!r} "
            f"for step {message.step!r}"
        )
    if isinstance(message, AgentRequest):
        if instance_number(message.instance_id) != message.attempt:
            # the call's fencing token: a service refuses every later call under the key below the highest it saw
            return (
                f"field 'attempt': {message.attempt} is not the attempt (or round) of instance {message.instance_id!r}"
            )
        forward = f"{message.order_id}:{message.step}"
        key = message.idempotency_key
        if key != forward and not key.startswith(f"{forward}:undo"):
            return f"field 'idempotencyKey': key {key!r} is not order {message.order_id!r}'s for step {message.step!r}"
    return None


class Contract(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid", strict=False
    )

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


MAX_LINES = 100
MAX_QUANTITY = 1000
MAX_UNIT_PRICE_CENTS = 10_000_000
# The largest total an order can have: no payment can be for more.
MAX_TOTAL_CENTS = MAX_LINES * MAX_QUANTITY * MAX_UNIT_PRICE_CENTS


class OrderLine(Contract):
    sku: Sku
    quantity: int = Field(ge=1, le=MAX_QUANTITY, strict=True)
    unit_price_cents: int = Field(ge=0, le=MAX_UNIT_PRICE_CENTS, strict=True)


class OrderSubmitted(Contract):
    type: Literal["OrderSubmitted"]
    schema_version: Literal[1]
    order_id: OrderId
    customer_id: Identifier
    lines: list[OrderLine] = Field(min_length=1, max_length=MAX_LINES)
    currency: Currency
    ship_to: ClientText
    reply_to: ReplyQueue | None = None
    # strict, as amounts are: "true", "yes" or 1 is refused, not read as true (it decides whether the
    # order is charged or waits for the provider's notification)
    prepaid: bool = Field(default=False, strict=True)

    @property
    def total_cents(self) -> int:
        return sum(line.quantity * line.unit_price_cents for line in self.lines)

    def order_document(self) -> dict[str, Any]:
        """The immutable order, as stored in the ``orders`` container."""
        body = self.model_dump(mode="json", by_alias=True, exclude={"type", "schema_version"})
        return {"id": self.order_id, **body, "totalCents": self.total_cents, "schemaVersion": 1}


class OrderSubmittedStoredBefore(OrderSubmitted):
    """An ``OrderSubmitted`` as the release before identifiers were one line (session 63) read it: ``customerId`` may
    hold a tab or a line break. Only for a message whose order document the app stored before, the same as it
    carries (``submission.stored_before``: a store-retry copy made then, a client's resend); every other rule holds."""

    customer_id: ClientText


class PaymentNotification(Contract):
    """A payment provider says an order was paid (prepaid orders). May arrive before its order."""

    type: Literal["PaymentNotification"]
    schema_version: Literal[1]
    notification_id: Identifier
    order_id: OrderId
    amount_cents: int = Field(ge=0, le=MAX_TOTAL_CENTS, strict=True)
    currency: Currency
    provider_reference: Identifier


class DeferredPaymentNotification(PaymentNotification):
    """A ``PaymentNotification`` as the app reads one it deferred (``deferral.apply.DEFERRABLE``): only the app
    defers, after its trigger read the message, so a deferred one was read by the release that deferred it. One
    deferred before identifiers were one line (session 63) may hold a tab or a line break in ``notificationId`` or
    ``providerReference``; it is read as its deferral entry, which holds the same ids, is (``ClientText``), and
    applied to its order: refused, the payment of a prepaid order was dead-lettered at the upgrade and the order
    given up, the customer's payment never captured. Read so too: a message off the queue that carries a
    notification the app stored before (on its order's record or in a deferral entry, every field the same:
    ``submission.stored_before``). Every other rule holds; a new message is a ``PaymentNotification``."""

    notification_id: ClientText
    provider_reference: ClientText


class RetryDeferred(Contract):
    """Scheduled by this app to itself on ``orders``: try again to apply the deferred message with this
    sequence number (a dependency of applying it was unavailable). ``round`` counts the tries so far.
    ``retryToken``: the token of the message's deferral entry (``DeferredEntry.retry_token``); one without it,
    or with another, is not the app's (absent only from retries of entries recorded before tokens were kept)."""

    type: Literal["RetryDeferred"]
    schema_version: Literal[1]
    sequence_number: int = Field(ge=0, le=INT64_MAX, strict=True)
    order_id: OrderId
    # the deferred message's MessageId, for the reader: the app acts on ``sequenceNumber`` and ``retryToken``. Read
    # on one line (``carriable``), not refused: an entry an older version recorded may hold a client's id as it came
    message_id: Annotated[ShortText, AfterValidator(carriable)]
    round: int = Field(ge=1, le=1000, strict=True)
    retry_token: Identifier | None = None


class CancelOrder(Contract):
    type: Literal["CancelOrder"]
    schema_version: Literal[1]
    order_id: OrderId
    reason: ClientReason


class OwnMessage(Contract):
    """A message the app builds and reads back itself: a field it does not know (a newer version's) is ignored."""

    model_config = ConfigDict(extra="ignore")


class AgentRequest(OwnMessage):
    type: Literal["AgentRequest"] = "AgentRequest"
    schema_version: Literal[1] = 1
    request_id: Identifier
    instance_id: InstanceId
    order_id: OrderId
    step: Identifier
    action: Identifier = "do"
    attempt: int = Field(ge=1, le=MAX_ATTEMPT)
    deadline: UtcDateTime
    idempotency_key: HeaderText
    payload: dict[str, Any]

    @model_validator(mode="after")
    def _instance_of_its_order(self) -> Self:
        _instance_of_order(self.instance_id, self.order_id)
        return self

    def activity_json(self) -> dict[str, Any]:
        """The request as the orchestrations hand it to activities (``begin_step``, ``send_agent_request``,
        an in-process agent): the body without ``type`` and ``schemaVersion``, which the agent's copy
        on the queue carries (``to_json``). Recorded in orchestration histories: keep it stable."""
        return self.model_dump(mode="json", by_alias=True, exclude={"type", "schema_version"})


class AgentReply(OwnMessage):
    type: Literal["AgentReply"] = "AgentReply"
    schema_version: Literal[1] = 1
    request_id: Identifier
    instance_id: InstanceId
    order_id: OrderId
    step: Identifier
    outcome: Literal["succeeded", "failed"]
    transient: bool = Field(default=False, strict=True)
    result: dict[str, Any] | None = None
    error: str | None = None
    # A transient failure without a call: the service's circuit was open (dependency health).
    dependency_open: bool = Field(default=False, strict=True)
    # A transient failure whose last call the service answered "still working on an earlier call with this key"
    # (``RemoteError.in_progress``): the service is up and doing it; its outcome is still to come.
    in_progress: bool = Field(default=False, strict=True)
    # The deadline of the request it answers (the step's ``completeBy``, where the attempt's timer ends the wait): the
    # reply relay tries a reply the Durable backend could not take again until then (order_agents/reply_relay.py).
    # Absent from replies of agents older than it (the relay then sizes its rounds from the step timeout); an older
    # relay ignores it.
    deadline: UtcDateTime | None = None

    @model_validator(mode="after")
    def _instance_of_its_order(self) -> Self:
        _instance_of_order(self.instance_id, self.order_id)
        return self


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
    attempt: int = Field(ge=0, le=MAX_ATTEMPT)
    at: UtcDateTime
    reason: str | None = None


class OperatorAlert(OwnMessage):
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
