"""The protocol between the orchestrations and their activities: one input type and one result type
per activity, each serialised explicitly at the boundary.

The orchestrator hands ``call_activity`` ``SomeInput(...).to_json()`` and reads the recorded result
with the activity's ``parse_*``; the activity function parses its input with ``SomeInput.from_json``
and answers ``result.to_json()``. What crosses is plain JSON (dicts, lists, text, numbers), the
only thing the Functions runtime's activity converters carry.

Replay: an orchestration replays its recorded inputs and results with the code of the day, so the
JSON here is exactly what the dict-based protocol before it sent and answered (same keys, same
values, same key order); ``tests/orchestrators/test_activity_protocol.py`` holds recorded examples
of every activity and checks that they parse and serialise back unchanged.

A fenced activity answers ``{"owned": False}`` (``NotOwned``) once its instance no longer holds the
record; every fenced result type is ``<what it found> | NotOwned``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Self, get_args

from contracts.messages import AgentRequest, StatusName
from domain.timefmt import parse, to_text

JsonDict = dict[str, Any]

STATUS_NAMES: frozenset[str] = frozenset(get_args(StatusName))


class ProtocolError(ValueError):
    """An activity input or result that is not what the protocol says."""


def _obj(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ProtocolError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ProtocolError(f"{key!r}: expected text, got {value!r}")
    return value


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"{key!r}: expected text or null, got {value!r}")
    return value


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{key!r}: expected an integer, got {value!r}")
    return value


def _opt_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return None if value is None else _int(data, key)


def _num(data: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"{key!r}: expected a number, got {value!r}")
    return value


def _dict(data: Mapping[str, Any], key: str, default: JsonDict | None = None) -> JsonDict:
    value = data.get(key, default)
    if not isinstance(value, dict):
        raise ProtocolError(f"{key!r}: expected a JSON object, got {value!r}")
    return value


def _opt_bool(data: Mapping[str, Any], key: str) -> bool | None:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise ProtocolError(f"{key!r}: expected true, false or null, got {value!r}")
    return value


def _owned(data: Mapping[str, Any]) -> bool:
    value = data.get("owned")
    if not isinstance(value, bool):
        raise ProtocolError(f"'owned': expected true or false, got {value!r}")
    return value


# --- results shared by the fenced activities ------------------------------------------------------------


@dataclass(frozen=True)
class NotOwned:
    """The instance no longer holds the record: the orchestration ends quietly (``FencingLost``)."""

    owned: ClassVar[bool] = False

    def to_json(self) -> JsonDict:
        return {"owned": False}


@dataclass(frozen=True)
class Owned:
    """The fenced write was made (or found already made by this instance)."""

    owned: ClassVar[bool] = True

    def to_json(self) -> JsonDict:
        return {"owned": True}


NOT_OWNED = NotOwned()
OWNED = Owned()

# The result of a fenced write that answers nothing more than whether it was made.
WriteResult = Owned | NotOwned


def parse_write_result(data: Any) -> WriteResult:
    return OWNED if _owned(_obj(data, "result")) else NOT_OWNED


# --- inputs shared in shape -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OrderInstance:
    """An order and the orchestration instance that must hold its record."""

    order_id: str
    instance_id: str

    def to_json(self) -> JsonDict:
        return {"orderId": self.order_id, "instanceId": self.instance_id}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(order_id=_str(d, "orderId"), instance_id=_str(d, "instanceId"))


@dataclass(frozen=True)
class StepFailure:
    """A forward step's failure as the scheduler reports it to a fenced write."""

    order_id: str
    instance_id: str
    step: str
    attempt: int
    error: str | None

    def to_json(self) -> JsonDict:
        return {
            "orderId": self.order_id,
            "instanceId": self.instance_id,
            "step": self.step,
            "attempt": self.attempt,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(
            order_id=_str(d, "orderId"),
            instance_id=_str(d, "instanceId"),
            step=_str(d, "step"),
            attempt=_int(d, "attempt"),
            error=_opt_str(d, "error"),
        )


def _request_from_json(data: Any) -> AgentRequest:
    return AgentRequest.model_validate(_obj(data, "request"))


# --- the scheduler's activities ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadOrderInput:
    """``load_order``. ``attempt``: announce ``Processing`` for this attempt once the record is found
    owned (tried once, as any progress status; not while the order waits an outage out)."""

    order_id: str
    instance_id: str
    attempt: int | None = None

    def to_json(self) -> JsonDict:
        announce: JsonDict = {} if self.attempt is None else {"attempt": self.attempt}
        return {"orderId": self.order_id, "instanceId": self.instance_id, **announce}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(order_id=_str(d, "orderId"), instance_id=_str(d, "instanceId"), attempt=_opt_int(d, "attempt"))


@dataclass(frozen=True)
class ReviewSettings:
    """What the scheduler needs to decide on review (``load_order`` reads it once per attempt)."""

    amount_threshold_cents: int = 0
    timeout_seconds: float = 86400.0
    default_action: str = "compensate"

    def to_json(self) -> JsonDict:
        return {
            "amountThresholdCents": self.amount_threshold_cents,
            "timeoutSeconds": self.timeout_seconds,
            "defaultAction": self.default_action,
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(
            amount_threshold_cents=int(_num(d, "amountThresholdCents", 0)),
            timeout_seconds=_num(d, "timeoutSeconds", 86400.0),
            default_action=str(d.get("defaultAction", "compensate")),
        )


@dataclass(frozen=True)
class OrderPlan:
    """``load_order``'s answer when the instance holds the record: the order, the results of steps done
    by earlier attempts, the agents of steps left in flight, and the rules of this attempt.

    ``reply_to_known`` is False only for a result recorded without ``replyTo`` (the status activity
    then reads the record itself)."""

    order: JsonDict
    completed: dict[str, JsonDict]
    step_timeout_seconds: float
    reply_to: str | None = None
    reply_to_known: bool = True
    in_flight: dict[str, str] = field(default_factory=dict)
    # waiting an outage out: the submitter was told so once (supervisor/outage.py), not per retry
    outage_wait: bool = False
    review: ReviewSettings = field(default_factory=ReviewSettings)
    # asked to announce the attempt: whether ``Processing`` went out (None: not asked, an outage wait, or
    # nowhere to send it)
    status_sent: bool | None = None

    owned: ClassVar[bool] = True

    def to_json(self) -> JsonDict:
        reply: JsonDict = {"replyTo": self.reply_to} if self.reply_to_known else {}
        announced: JsonDict = {} if self.status_sent is None else {"statusSent": self.status_sent}
        return {
            **reply,
            "owned": True,
            "order": self.order,
            "completed": self.completed,
            "inFlight": self.in_flight,
            "outageWait": self.outage_wait,
            "stepTimeoutSeconds": self.step_timeout_seconds,
            "review": self.review.to_json(),
            **announced,
        }


LoadOrderResult = OrderPlan | NotOwned


def parse_load_order(data: Any) -> LoadOrderResult:
    d = _obj(data, "load_order result")
    if not _owned(d):
        return NOT_OWNED
    return OrderPlan(
        order=_dict(d, "order"),
        completed=dict(_dict(d, "completed")),
        step_timeout_seconds=_num(d, "stepTimeoutSeconds"),
        reply_to=_opt_str(d, "replyTo"),
        reply_to_known="replyTo" in d,
        in_flight=dict(d.get("inFlight") or {}),
        outage_wait=bool(d.get("outageWait")),
        review=ReviewSettings.from_json(d.get("review") or {}),
        status_sent=_opt_bool(d, "statusSent"),
    )


@dataclass(frozen=True)
class StepResult:
    """A step's result that the scheduler has and the record does not yet: the next fenced write (the
    next step's ``begin_step``, or ``mark_processed``) records it in the same write."""

    step: str
    result: JsonDict

    def to_json(self) -> JsonDict:
        return {"step": self.step, "result": self.result}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(step=_str(d, "step"), result=_dict(d, "result"))


def _completes(d: Mapping[str, Any]) -> StepResult | None:
    value = d.get("completes")
    return None if value is None else StepResult.from_json(value)


@dataclass(frozen=True)
class BeginStepInput:
    """``begin_step``: record that the step started with ``agent`` and its deadline (the request's),
    after recording ``completes`` (the previous step's result) in the same write; then, with a
    ``queue``, send the request onto it (a Service Bus agent's request queue)."""

    request: AgentRequest
    agent: str
    completes: StepResult | None = None
    queue: str | None = None

    def to_json(self) -> JsonDict:
        payload: JsonDict = {"request": self.request.activity_json(), "agent": self.agent}
        if self.completes is not None:
            payload["completes"] = self.completes.to_json()
        if self.queue is not None:
            payload["queue"] = self.queue
        return payload

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(
            request=_request_from_json(d.get("request")),
            agent=_str(d, "agent"),
            completes=_completes(d),
            queue=_opt_str(d, "queue"),
        )


@dataclass(frozen=True)
class StepBegun:
    """``begin_step`` wrote the start. ``payment``: a prepaid order's payment notification (its
    document) when it was already on the record."""

    payment: JsonDict | None = None

    owned: ClassVar[bool] = True

    def to_json(self) -> JsonDict:
        return {"owned": True} if self.payment is None else {"owned": True, "payment": self.payment}


BeginStepResult = StepBegun | NotOwned


def parse_begin_step(data: Any) -> BeginStepResult:
    d = _obj(data, "begin_step result")
    if not _owned(d):
        return NOT_OWNED
    payment = d.get("payment")
    return StepBegun(payment=None if payment is None else _dict(d, "payment"))


@dataclass(frozen=True)
class SendAgentRequestInput:
    """``send_agent_request`` (answers nothing): the request, onto the agent's request queue."""

    queue: str
    request: AgentRequest

    def to_json(self) -> JsonDict:
        return {"queue": self.queue, "request": self.request.activity_json()}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(queue=_str(d, "queue"), request=_request_from_json(d.get("request")))


class ReleaseForRetryInput(StepFailure):
    """``release_for_retry``: a transient failure; ``completeBy`` pulled to now."""


class FailOrderInput(StepFailure):
    """``fail_order``: a non-transient failure ends the order (``Failed``)."""


@dataclass(frozen=True)
class MarkProcessedInput:
    """``mark_processed``: every step done; ``completes``, the last step's result, recorded in the same
    write. The activity then tells the submitter ``Completed`` (once; ``Processed`` says if it did)."""

    order_id: str
    instance_id: str
    attempt: int
    completes: StepResult | None = None

    def to_json(self) -> JsonDict:
        payload: JsonDict = {"orderId": self.order_id, "instanceId": self.instance_id, "attempt": self.attempt}
        if self.completes is not None:
            payload["completes"] = self.completes.to_json()
        return payload

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(
            order_id=_str(d, "orderId"),
            instance_id=_str(d, "instanceId"),
            attempt=_int(d, "attempt"),
            completes=_completes(d),
        )


@dataclass(frozen=True)
class Processed:
    """``mark_processed`` wrote ``Processed``. ``status_sent``: True, the ``Completed`` status went out;
    False, its send failed (the scheduler retries it on timers; also read from an answer without the
    key); None, nothing was sent and nothing is to retry (no ``replyTo``, or a queue that refuses)."""

    status_sent: bool | None

    owned: ClassVar[bool] = True

    def to_json(self) -> JsonDict:
        return {"owned": True, "statusSent": self.status_sent}


MarkProcessedResult = Processed | NotOwned


def parse_mark_processed(data: Any) -> MarkProcessedResult:
    d = _obj(data, "mark_processed result")
    if not _owned(d):
        return NOT_OWNED
    return Processed(status_sent=_opt_bool(d, "statusSent") if "statusSent" in d else False)


@dataclass(frozen=True)
class PublishStatusInput:
    """``publish_status`` (answers nothing): one status update to the order's ``replyTo``.
    ``reply_to_known`` False: the activity reads ``replyTo`` from the record."""

    order_id: str
    status: StatusName
    attempt: int
    reply_to: str | None = None
    reply_to_known: bool = False
    reason: str | None = None

    def to_json(self) -> JsonDict:
        payload: JsonDict = {"orderId": self.order_id, "status": self.status, "attempt": self.attempt}
        if self.reply_to_known:
            payload["replyTo"] = self.reply_to
        if self.reason is not None:
            payload["reason"] = self.reason
        return payload

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        status = _str(d, "status")
        if status not in STATUS_NAMES:
            raise ProtocolError(f"'status': not a status: {status!r}")
        return cls(
            order_id=_str(d, "orderId"),
            status=status,  # type: ignore[arg-type]  # checked against STATUS_NAMES just above
            attempt=_int(d, "attempt"),
            reply_to=_opt_str(d, "replyTo"),
            reply_to_known="replyTo" in d,
            reason=_opt_str(d, "reason"),
        )


@dataclass(frozen=True)
class SettleRetiredInput:
    """``settle_retired_attempt``: what an instance of a retired scheduler version left to settle."""

    order_id: str
    instance_id: str
    attempt: int

    def to_json(self) -> JsonDict:
        return {"orderId": self.order_id, "instanceId": self.instance_id, "attempt": self.attempt}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(order_id=_str(d, "orderId"), instance_id=_str(d, "instanceId"), attempt=_int(d, "attempt"))


@dataclass(frozen=True)
class RetiredSettled:
    """``settle_retired_attempt``'s answer: ``released``, the record it still held is handed to the
    supervisor now (``completeBy`` = now); ``completed_status``: it had written ``Processed``, and the
    ``Completed`` status was sent (True), failed (False: retry it) or had nowhere to go (None)."""

    released: bool = False
    completed_status: bool | None = None

    def to_json(self) -> JsonDict:
        return {"released": self.released, "completedStatus": self.completed_status}


def parse_retired_settled(data: Any) -> RetiredSettled:
    d = _obj(data, "settle_retired_attempt result")
    released = d.get("released")
    if not isinstance(released, bool):
        raise ProtocolError(f"'released': expected true or false, got {released!r}")
    return RetiredSettled(released=released, completed_status=_opt_bool(d, "completedStatus"))


# --- the scheduler's compensation-related writes ----------------------------------------------------------


@dataclass(frozen=True)
class RequestCompensationInput:
    """``request_compensation``: hand the order over to compensation."""

    order_id: str
    instance_id: str
    step: str
    attempt: int
    error: str | None
    reason: str | None

    def to_json(self) -> JsonDict:
        return {
            "orderId": self.order_id,
            "instanceId": self.instance_id,
            "step": self.step,
            "attempt": self.attempt,
            "error": self.error,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(
            order_id=_str(d, "orderId"),
            instance_id=_str(d, "instanceId"),
            step=_str(d, "step"),
            attempt=_int(d, "attempt"),
            error=_opt_str(d, "error"),
            reason=_opt_str(d, "reason"),
        )


@dataclass(frozen=True)
class AwaitReviewInput:
    """``await_review``: pause the attempt for an operator until ``until``."""

    order_id: str
    instance_id: str
    step: str
    attempt: int
    review_id: str
    until: datetime
    error: str | None
    reason: str | None
    default_action: str
    amount_cents: int | None

    def to_json(self) -> JsonDict:
        return {
            "orderId": self.order_id,
            "instanceId": self.instance_id,
            "step": self.step,
            "attempt": self.attempt,
            "reviewId": self.review_id,
            "until": to_text(self.until),
            "error": self.error,
            "reason": self.reason,
            "defaultAction": self.default_action,
            "amountCents": self.amount_cents,
        }

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        try:
            until = parse(_str(d, "until"))
        except ValueError as exc:
            raise ProtocolError(f"'until': {exc}") from exc
        return cls(
            order_id=_str(d, "orderId"),
            instance_id=_str(d, "instanceId"),
            step=_str(d, "step"),
            attempt=_int(d, "attempt"),
            review_id=_str(d, "reviewId"),
            until=until,
            error=_opt_str(d, "error"),
            reason=_opt_str(d, "reason"),
            default_action=_str(d, "defaultAction"),
            amount_cents=_opt_int(d, "amountCents"),
        )


# --- the compensation orchestration's activities ----------------------------------------------------------


class LoadCompensationInput(OrderInstance):
    """``load_compensation``."""


@dataclass(frozen=True)
class CompensationPlan:
    """``load_compensation``'s answer when the round holds the record: the compensation log (entry
    documents) and the retry rules of the round."""

    entries: list[JsonDict]
    step_timeout_seconds: float
    undo_tries: int
    retry_base_seconds: float
    retry_max_seconds: float
    reply_to: str | None = None
    reply_to_known: bool = True
    # waiting an outage out: the submitter was told so once (supervisor/outage.py), not per round
    outage_wait: bool = False

    owned: ClassVar[bool] = True

    def to_json(self) -> JsonDict:
        reply: JsonDict = {"replyTo": self.reply_to} if self.reply_to_known else {}
        return {
            "owned": True,
            **reply,
            "outageWait": self.outage_wait,
            "entries": self.entries,
            "stepTimeoutSeconds": self.step_timeout_seconds,
            "undoTries": self.undo_tries,
            "retryBaseSeconds": self.retry_base_seconds,
            "retryMaxSeconds": self.retry_max_seconds,
        }


LoadCompensationResult = CompensationPlan | NotOwned


def parse_load_compensation(data: Any) -> LoadCompensationResult:
    d = _obj(data, "load_compensation result")
    if not _owned(d):
        return NOT_OWNED
    entries = d.get("entries")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ProtocolError(f"'entries': expected a list of JSON objects, got {entries!r}")
    return CompensationPlan(
        entries=list(entries),
        step_timeout_seconds=_num(d, "stepTimeoutSeconds"),
        undo_tries=int(_num(d, "undoTries")),
        retry_base_seconds=_num(d, "retryBaseSeconds"),
        retry_max_seconds=_num(d, "retryMaxSeconds"),
        reply_to=_opt_str(d, "replyTo"),
        reply_to_known="replyTo" in d,
        outage_wait=bool(d.get("outageWait")),
    )


@dataclass(frozen=True)
class BeginUndoInput:
    """``begin_undo``: record the undo of log entry ``seq`` in flight, and its deadline (the request's)."""

    request: AgentRequest
    agent: str
    seq: int

    def to_json(self) -> JsonDict:
        return {"request": self.request.activity_json(), "agent": self.agent, "seq": self.seq}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(request=_request_from_json(d.get("request")), agent=_str(d, "agent"), seq=_int(d, "seq"))


@dataclass(frozen=True)
class RecordUndoInput:
    """``record_undo``: log entry ``seq`` undone."""

    order_id: str
    instance_id: str
    seq: int

    def to_json(self) -> JsonDict:
        return {"orderId": self.order_id, "instanceId": self.instance_id, "seq": self.seq}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(order_id=_str(d, "orderId"), instance_id=_str(d, "instanceId"), seq=_int(d, "seq"))


class FinishCompensationInput(OrderInstance):
    """``finish_compensation``: every entry undone."""


@dataclass(frozen=True)
class FailCompensationInput:
    """``fail_compensation``: the undo of entry ``seq`` failed for good."""

    order_id: str
    instance_id: str
    seq: int
    error: str | None

    def to_json(self) -> JsonDict:
        return {"orderId": self.order_id, "instanceId": self.instance_id, "seq": self.seq, "error": self.error}

    @classmethod
    def from_json(cls, data: Any) -> Self:
        d = _obj(data, cls.__name__)
        return cls(
            order_id=_str(d, "orderId"),
            instance_id=_str(d, "instanceId"),
            seq=_int(d, "seq"),
            error=_opt_str(d, "error"),
        )
