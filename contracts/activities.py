"""The protocol between the orchestrations and their activities: one input type and one result type
per activity, each a frozen dataclass whose fields are its JSON, converted by ``contracts.converter``.

Read a type's fields as its JSON object: the keys are the field names in camelCase, in field order;
``Annotated`` markers say where a key departs from that (``OMIT_NONE``: left out when None;
``WrittenIf``: written only when known; ``NULL_IS_DEFAULT``, ``FROM_NUMBER``: what older writers
sent). ``owned`` (a fenced activity's answer) is a constant field, written where it stands.

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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from contracts.converter import (
    FROM_NUMBER,
    NULL_IS_DEFAULT,
    OMIT_NONE,
    JsonDict,
    ProtocolError,
    Wire,
    WrittenIf,
    from_json,
)
from contracts.messages import AgentRequest, StatusName

# Re-exported from the converter (callers import them from here; mypy strict wants it said). Nothing
# star-imports this module, so __all__ serves only that.
__all__ = ["JsonDict", "ProtocolError"]


def _obj(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ProtocolError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def _owned(data: Any, what: str) -> bool:
    value = _obj(data, what).get("owned")
    if not isinstance(value, bool):
        raise ProtocolError(f"'owned': expected true or false, got {value!r}")
    return value


# --- results shared by the fenced activities ------------------------------------------------------------


@dataclass(frozen=True)
class NotOwned(Wire):
    """The instance no longer holds the record: the orchestration ends quietly (``FencingLost``)."""

    owned: Literal[False] = field(default=False, init=False)


@dataclass(frozen=True)
class Owned(Wire):
    """The fenced write was made (or found already made by this instance). ``moved_on`` (a hand-over's answer
    only): found made by an earlier run of the activity, and the record moved on since (an operator resubmitted
    or compensated the order again, the next attempt or round claimed it: ``activities.fencing.moved_on``).
    The orchestration ends with its outcome as it would, but tells the submitter nothing: the order is no longer
    its to speak for."""

    owned: Literal[True] = field(default=True, init=False)
    moved_on: Annotated[bool | None, OMIT_NONE] = None  # None, not False: the answer as it was before the key


NOT_OWNED = NotOwned()
OWNED = Owned()
MOVED_ON = Owned(moved_on=True)

# The result of a fenced write that answers nothing more than whether it was made.
WriteResult = Owned | NotOwned


def _fenced[T: Wire](kind: type[T], data: Any, what: str) -> T | NotOwned:
    """A fenced activity's answer: ``NOT_OWNED``, or ``kind`` read from it."""
    return from_json(kind, data) if _owned(data, what) else NOT_OWNED


def parse_write_result(data: Any) -> WriteResult:
    return from_json(Owned, data) if _owned(data, "result") else NOT_OWNED


# --- inputs shared in shape -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OrderInstance(Wire):
    """An order and the orchestration instance that must hold its record."""

    order_id: str
    instance_id: str
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes


@dataclass(frozen=True)
class StepFailure(Wire):
    """A forward step's failure as the scheduler reports it to a fenced write."""

    order_id: str
    instance_id: str
    step: str
    attempt: int
    error: str | None
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes


# --- the scheduler's activities ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewSettings(Wire):
    """What the scheduler needs to decide on review (in the attempt's plan)."""

    amount_threshold_cents: Annotated[int, FROM_NUMBER] = 0
    timeout_seconds: float = 86400.0
    default_action: str = "compensate"


@dataclass(frozen=True, kw_only=True)
class OrderPlan(Wire):
    """What an attempt needs before its first write: the order, the results of steps done by earlier
    attempts, the agents of steps left in flight, and the rules of this attempt. Read by whoever
    claimed the record (``orchestrators.attempt_plan``) and handed over in the orchestration's input.

    ``reply_to_known`` is False only for a plan recorded without ``replyTo`` (the status activity
    then reads the record itself)."""

    reply_to: Annotated[str | None, WrittenIf("reply_to_known")] = None
    reply_to_known: bool = True
    order: JsonDict
    completed: dict[str, JsonDict]
    in_flight: Annotated[dict[str, str], NULL_IS_DEFAULT] = field(default_factory=dict)
    # waiting an outage out: the submitter was told so once (supervisor/outage.py), not per retry
    outage_wait: Annotated[bool, NULL_IS_DEFAULT] = False
    step_timeout_seconds: float
    review: Annotated[ReviewSettings, NULL_IS_DEFAULT] = field(default_factory=ReviewSettings)
    # waiting for the payment notification: told once too (supervisor/payment_wait.py); absent on a plan
    # read before the wait existed, or of an order not waiting
    payment_wait: Annotated[bool | None, OMIT_NONE] = None


@dataclass(frozen=True)
class AttemptInput(Wire):
    """The scheduler's input (``process_order_v3`` and ``_v4``): the order, the attempt, and its plan, read when the
    record was claimed for this attempt. ``orderId`` and ``attempt`` are what every version's input
    holds (``orchestrators/retired.py`` reads them)."""

    order_id: str
    attempt: int
    plan: OrderPlan
    # set on every attempt started since a wait loop's round after a skipped event races a timer of its
    # own (``orchestrators.timers.next_round_timer``); absent on an instance started before
    timer_per_round: Annotated[bool | None, OMIT_NONE] = None
    # the submitter may not have heard ``Received`` and nothing on the record says so: the attempt's first
    # ``begin_step`` says it before its write (``notifications.received.owe_if_unheard``). Set on an attempt 1
    # the starter claimed (its record was created ``Pending``) and on submission's fast-path claim when the
    # ``receivedOwed`` mark after a failed send could not be written; absent otherwise and on older instances
    say_received: Annotated[bool | None, OMIT_NONE] = None
    # set on every attempt started since a review reads its choices against the fallback that can take the
    # step over for the order (``Step.fallback_for``: none for a prepaid order): ``alternative`` is then not
    # offered there and, still answered or the default, read as with no fallback (``fail``). Absent on an
    # instance started before, which replays as recorded (its ``alternative`` runs the step's fallback)
    reviews_fit_fallback: Annotated[bool | None, OMIT_NONE] = None
    # set on every attempt started since a step's deadline is its ``begin_step``'s time plus the timeout (the
    # activity answers it, ``BeginStepInput.timeout_seconds``); absent on an instance started before, which
    # keeps its replay time plus the timeout (the deadline its timers were created with)
    deadline_at_begin: Annotated[bool | None, OMIT_NONE] = None
    # set on every attempt started since a final status's last try answers its give-up (``StatusGivenUp``) and a last
    # try that fails without answering (its worker killed, a crash) is repeated (``orchestrators.status``,
    # ``ANSWERS_GIVE_UP_INPUT``); absent on an instance started before, which replays as recorded (such a failure ends
    # the status's timers)
    answers_give_up: Annotated[bool | None, OMIT_NONE] = None


@dataclass(frozen=True)
class StepResult(Wire):
    """A step's result that the scheduler has and the record does not yet: the next fenced write (the
    next step's ``begin_step``, or ``mark_processed``) records it in the same write."""

    step: str
    result: JsonDict


@dataclass(frozen=True)
class BeginStepInput(Wire):
    """``begin_step``: record that the step started with ``agent`` and its deadline (the request's),
    after recording ``completes`` (the previous step's result) in the same write; then, with
    ``announce`` (the attempt's first write), tell the submitter ``Processing`` (tried once); then, with
    a ``queue``, send the request onto it (a Service Bus agent's request queue)."""

    request: AgentRequest
    agent: str
    completes: Annotated[StepResult | None, OMIT_NONE] = None
    queue: Annotated[str | None, OMIT_NONE] = None
    announce: Annotated[bool | None, OMIT_NONE] = None
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes
    # the attempt's first write, of an attempt whose input says ``sayReceived``: ``Received`` said before it
    say_received: Annotated[bool | None, OMIT_NONE] = None
    # an attempt started with ``deadlineAtBegin``: the step's deadline is this write's time plus this (or the
    # request's, if later), sent with the request and answered (``StepBegun.deadline``); absent, the request's
    timeout_seconds: Annotated[float | None, OMIT_NONE] = None


@dataclass(frozen=True)
class StepBegun(Wire):
    """``begin_step`` wrote the start. ``payment``: a prepaid order's payment notification (its
    document) when it was already on the record."""

    owned: Literal[True] = field(default=True, init=False)
    payment: Annotated[JsonDict | None, OMIT_NONE] = None
    # asked to announce the attempt: whether ``Processing`` went out (None: not asked, or nowhere to send it)
    status_sent: Annotated[bool | None, OMIT_NONE] = None
    # asked with ``timeoutSeconds``: the step's deadline as written (the attempt's timer races it); None: not asked
    deadline: Annotated[datetime | None, OMIT_NONE] = None


BeginStepResult = StepBegun | NotOwned


def parse_begin_step(data: Any) -> BeginStepResult:
    return _fenced(StepBegun, data, "begin_step result")


@dataclass(frozen=True)
class SendAgentRequestInput(Wire):
    """``send_agent_request`` (answers nothing): the request, onto the agent's request queue."""

    queue: str
    request: AgentRequest


@dataclass(frozen=True)
class ReleaseForRetryInput(StepFailure):
    """``release_for_retry``: a transient failure; ``completeBy`` pulled to now (less the supervisor's grace)."""

    # the agent's last try was answered "still working on an earlier call with this key" by the step's service
    # (``AgentReply.in_progress``): the step is being done, its outcome still to come; the supervisor waits for it as
    # for an outage (``domain.outage.still_working``). None: not so, or an orchestration recorded before the field
    still_working: Annotated[bool | None, OMIT_NONE] = None
    # the agent made no call: the step's service's circuit was open (``AgentReply.dependency_open``), proof of an outage
    # during the step whatever clock dated the circuit's closing (``domain.outage.forward_in_flight``). None: not so, or
    # an orchestration recorded before the field
    dependency_open: Annotated[bool | None, OMIT_NONE] = None


class FailOrderInput(StepFailure):
    """``fail_order``: a non-transient failure ends the order (``Failed``)."""


@dataclass(frozen=True)
class MarkProcessedInput(Wire):
    """``mark_processed``: every step done; ``completes``, the last step's result, recorded in the same
    write. The activity then tells the submitter ``Completed`` (once; ``Processed`` says if it did)."""

    order_id: str
    instance_id: str
    attempt: int
    completes: Annotated[StepResult | None, OMIT_NONE] = None
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes


@dataclass(frozen=True)
class Processed(Wire):
    """``mark_processed`` wrote ``Processed``. ``status_sent``: True, the ``Completed`` status went out;
    False, its send failed (the scheduler retries it on timers; also read from an answer without the
    key, as ``_v1`` recorded it); None, nothing was sent and nothing is to retry (no ``replyTo``, or a
    queue that refuses)."""

    owned: Literal[True] = field(default=True, init=False)
    status_sent: bool | None = False


MarkProcessedResult = Processed | NotOwned


def parse_mark_processed(data: Any) -> MarkProcessedResult:
    return _fenced(Processed, data, "mark_processed result")


@dataclass(frozen=True)
class PublishStatusInput(Wire):
    """``publish_status``: one status update to the order's ``replyTo``; it answers nothing (None) when the
    status was sent or is not to be sent (nowhere to go; a ``Rejected`` superseded or a ``Failed`` or
    ``CompensationFailed`` whose order moved on since: its orchestration must stop trying), ``StatusRefused`` when
    the reply queue refused this app, ``ReceivedUnsent`` and ``StatusGivenUp`` as they say.
    ``reply_to_known`` False: the activity reads ``replyTo`` from the record. ``variant``: a second update
    of the same status and attempt, under a MessageId of its own (``notifications.status.publish_status``;
    the courier's ``Rejected`` of one refused message)."""

    order_id: str
    status: StatusName
    attempt: int
    reply_to: Annotated[str | None, WrittenIf("reply_to_known")] = None
    reply_to_known: bool = False
    reason: Annotated[str | None, OMIT_NONE] = None
    variant: Annotated[str | None, OMIT_NONE] = None
    last_try: Annotated[bool | None, OMIT_NONE] = None  # a final status's last try on its timers
    # A final status's timers count the tries that could not say the Received still owed before it apart from the
    # status's own (``orchestrators.status``): how many more such tries they make after this one (0: this is the last,
    # a failure gives both up). Such a failure is then answered ``ReceivedUnsent``, not raised. None: counted as the
    # status's own (a progress status, ``Failed`` and ``CompensationFailed``, an input from before it existed).
    received_tries_left: Annotated[int | None, OMIT_NONE] = None
    # on a last try (``last_try``) of an orchestration started since: once given up and alerted, the try answers
    # ``StatusGivenUp`` instead of raising, so the orchestration tells it from a try that failed without running its
    # give-up (and repeats that one). None: it raises, as before (an orchestration started before, which ends its
    # timers on any failure of the last try)
    answers_give_up: Annotated[bool | None, OMIT_NONE] = None


@dataclass(frozen=True)
class StatusRefused(Wire):
    """``publish_status``'s answer when the submitter's reply queue refused this app (``QueueNotFound``: it does
    not exist, or this app may not send to it yet): not a failure of the activity (an orchestration cannot tell
    one exception from another), so the orchestration tries a final status again for a bounded time
    (``orchestrators.status.REFUSED_RETRY_WINDOW``). ``error``: what Service Bus said. A ``publish_status`` answer
    recorded before this type existed is None, whatever happened (a refusal then was dropped at once)."""

    refused: Literal[True] = field(default=True, init=False)
    error: str = ""


@dataclass(frozen=True)
class ReceivedUnsent(Wire):
    """``publish_status``'s answer when the ``Received`` the order's record still owes, said before the status, could
    not be sent (a failed send) and the input counts such tries apart (``received_tries_left``): the status was not
    sent, and its orchestration tries again on the ``Received``'s own count of tries. ``error``: the send's."""

    unsent: Literal["Received"] = field(default="Received", init=False)
    error: str = ""


@dataclass(frozen=True)
class StatusGivenUp(Wire):
    """``publish_status``'s answer on a last try that asked for it (``answers_give_up``) and failed: the status (and
    any ``Received`` it waited for) was given up and alerted ``StatusUndelivered`` (``notifications.status.give_up``),
    so the orchestration ends its timers. A last try that fails instead (raises) did not run that give-up: its
    worker was killed (``functionTimeout``), crashed, or met an unexpected error, and the orchestration repeats it.
    ``error``: what failed."""

    given_up: Literal[True] = field(default=True, init=False)
    error: str = ""


def parse_publish_status(data: Any) -> StatusRefused | ReceivedUnsent | StatusGivenUp | None:
    """None: sent, or nothing to send (and every answer recorded before ``StatusRefused``); either way the
    orchestration stops trying."""
    if data is None:
        return None
    answer = _obj(data, "publish_status result")
    if answer.get("refused") is True:
        return StatusRefused.from_json(data)
    if answer.get("unsent") == "Received":
        return ReceivedUnsent.from_json(data)
    if answer.get("givenUp") is True:
        return StatusGivenUp.from_json(data)
    raise ProtocolError(
        f"publish_status result: expected null, a refusal, a Received unsent or a give-up, got {data!r}"
    )


@dataclass(frozen=True)
class SendAlertInput(Wire):
    """``send_alert`` (answers None, or ``AlertGivenUp``), the alert courier's activity: one operator alert whose
    send failed where it was raised, as it was built there (``OperatorAlert``'s JSON: its ``alertId`` is its MessageId,
    so a repeat collapses in duplicate detection; ``notifications.alerts.send_owed_alert``). ``last_try``:
    the courier's last try (a failure then is logged ``AlertUndelivered``)."""

    alert: JsonDict
    last_try: Annotated[bool | None, OMIT_NONE] = None
    # on the courier's input, and on its last try's, since a last try answers its give-up (``AlertGivenUp``) and one
    # that fails without answering is repeated (``orchestrators.alert``); None: a failed last try raises, as before
    answers_give_up: Annotated[bool | None, OMIT_NONE] = None


@dataclass(frozen=True)
class AlertGivenUp(Wire):
    """``send_alert``'s answer on a last try that asked for it (``answers_give_up``) and failed: the alert was
    logged ``AlertUndelivered`` (``notifications.alerts.send_owed_alert``), so the courier ends. ``error``: the
    send's."""

    given_up: Literal[True] = field(default=True, init=False)
    error: str = ""


def parse_send_alert(data: Any) -> AlertGivenUp | None:
    """None: sent (every answer recorded before ``AlertGivenUp`` is None)."""
    if data is None:
        return None
    if _obj(data, "send_alert result").get("givenUp") is True:
        return AlertGivenUp.from_json(data)
    raise ProtocolError(f"send_alert result: expected null or a give-up, got {data!r}")


@dataclass(frozen=True)
class SettleRetiredInput(Wire):
    """``settle_retired_attempt``: what an instance of a retired scheduler version left to settle."""

    order_id: str
    instance_id: str
    attempt: int


@dataclass(frozen=True)
class RetiredSettled(Wire):
    """``settle_retired_attempt``'s answer (not fenced: it reads first): ``released``, the record it
    still held is handed to the supervisor now (``completeBy`` = now less its grace); ``completed_status``: it had
    written ``Processed``, and the ``Completed`` status was sent (True), failed (False: retry it) or
    had nowhere to go (None)."""

    released: bool = False
    completed_status: bool | None = None


def parse_retired_settled(data: Any) -> RetiredSettled:
    d = _obj(data, "settle_retired_attempt result")
    if "released" not in d:  # required in an answer, though it has a default to build one with
        raise ProtocolError("'released': expected true or false, got None")
    return RetiredSettled.from_json(d)


# --- the scheduler's compensation-related writes ----------------------------------------------------------


@dataclass(frozen=True)
class RequestCompensationInput(Wire):
    """``request_compensation``: hand the order over to compensation."""

    order_id: str
    instance_id: str
    step: str
    attempt: int
    error: str | None
    reason: str | None
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes


@dataclass(frozen=True)
class AwaitReviewInput(Wire):
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
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes
    # the answers the alert offers (``compensation_policy.review_choices``); absent from an attempt started
    # before ``reviewsFitFallback``: every choice
    choices: Annotated[list[str] | None, OMIT_NONE] = None


@dataclass(frozen=True)
class CloseReviewInput(Wire):
    """``close_review`` (``process_order_v4``): the review deadline passed; close the review with one
    fenced write, taking an answer the record noted in time, else ``default_action``."""

    order_id: str
    instance_id: str
    attempt: int
    review_id: str
    default_action: str
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes


@dataclass(frozen=True)
class ReviewClosed(Wire):
    """``close_review`` wrote the close: the action the attempt takes, and the operator who chose it
    (None: nobody answered in time, the default)."""

    owned: Literal[True] = field(default=True, init=False)
    action: str
    operator: str | None


CloseReviewResult = ReviewClosed | NotOwned


def parse_close_review(data: Any) -> CloseReviewResult:
    return _fenced(ReviewClosed, data, "close_review result")


# --- the compensation orchestration's activities ----------------------------------------------------------


class LoadCompensationInput(OrderInstance):
    """``load_compensation``."""


@dataclass(frozen=True)
class UndoEntry(Wire):
    """One entry of the compensation log, as ``load_compensation`` hands it over: what the round reads
    of it (``seq``, the step, its agent, the undo's data, whether an earlier round undid it), and
    ``document``, the entry's document as the record stores it (``adapters.cosmos.mapping``), which is
    what crosses: it is answered and read back as it is, whatever keys it has."""

    seq: int
    step: str
    agent: str
    data: JsonDict
    outcome: str | None = None  # None (not undone yet) | "Undone" | "Failed"
    document: JsonDict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        fields = {key: value for key, value in _obj(data, "entry").items() if key != "document"}
        return replace(from_json(cls, fields), document=dict(data))

    def to_json(self) -> JsonDict:
        if self.document:
            return dict(self.document)
        # built from its fields (not read from a log): what the round reads of it
        return {key: value for key, value in super().to_json().items() if key != "document"}


@dataclass(frozen=True, kw_only=True)
class CompensationPlan(Wire):
    """``load_compensation``'s answer when the round holds the record: the compensation log and the
    retry rules of the round."""

    owned: Literal[True] = field(default=True, init=False)
    reply_to: Annotated[str | None, WrittenIf("reply_to_known")] = None
    reply_to_known: bool = True
    # waiting an outage out: the submitter was told so once (supervisor/outage.py), not per round
    outage_wait: Annotated[bool, NULL_IS_DEFAULT] = False
    entries: list[UndoEntry]
    step_timeout_seconds: float
    undo_tries: Annotated[int, FROM_NUMBER]
    retry_base_seconds: float
    retry_max_seconds: float


LoadCompensationResult = CompensationPlan | NotOwned


def parse_load_compensation(data: Any) -> LoadCompensationResult:
    return _fenced(CompensationPlan, data, "load_compensation result")


@dataclass(frozen=True)
class BeginUndoInput(Wire):
    """``begin_undo``: record the undo of log entry ``seq`` in flight, and its deadline (the request's)."""

    request: AgentRequest
    agent: str
    seq: int
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes
    # a round started with ``deadlineAtBegin``: the undo's deadline is this write's time plus this (or the request's,
    # if later), answered (``UndoBegun.deadline``); absent, the request's (``BeginStepInput.timeout_seconds``)
    timeout_seconds: Annotated[float | None, OMIT_NONE] = None


@dataclass(frozen=True)
class UndoBegun(Wire):
    """``begin_undo`` wrote the undo in flight. ``deadline``: asked with ``timeoutSeconds``, its deadline as written
    (the round's timer and request take it); None: not asked (an answer as ``Owned``'s)."""

    owned: Literal[True] = field(default=True, init=False)
    deadline: Annotated[datetime | None, OMIT_NONE] = None


def parse_begin_undo(data: Any) -> UndoBegun | NotOwned:
    return _fenced(UndoBegun, data, "begin_undo result")


@dataclass(frozen=True)
class HoldUndoInput(Wire):
    """``hold_undo``: the round waits a backoff after a transient failure of entry ``seq``'s undo and tries it
    again not before ``until``: ``completeBy`` moves past it, so the round waiting is not taken for stuck."""

    order_id: str
    instance_id: str
    seq: int
    until: datetime
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes


@dataclass(frozen=True)
class ReleaseUndoInput(Wire):
    """``release_undo``: the undo of entry ``seq`` met its service's open circuit (``error``, the agent's: no call was
    made) and the round ends: ``completeBy`` pulled to now (less the supervisor's grace), ``lockedBy`` kept, so the
    supervisor releases the round to wait the outage out at once (``domain.compensation.release_undo``)."""

    order_id: str
    instance_id: str
    seq: int
    error: str | None
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes


@dataclass(frozen=True)
class RecordUndoInput(Wire):
    """``record_undo``: log entry ``seq`` undone; ``result``: the undo's answer (what it did, e.g. a
    refund of nothing), kept on the entry. Left out by orchestrations recorded before it was sent."""

    order_id: str
    instance_id: str
    seq: int
    result: Annotated[JsonDict | None, OMIT_NONE] = None
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes


class FinishCompensationInput(OrderInstance):
    """``finish_compensation``: every entry undone."""


@dataclass(frozen=True)
class FailCompensationInput(Wire):
    """``fail_compensation``: the undo of entry ``seq`` failed for good, or used up its tries on transient
    failures (``used_up_tries``; ``error`` then ends as ``tries_used_up`` words it)."""

    order_id: str
    instance_id: str
    seq: int
    error: str | None
    write_number: Annotated[int | None, OMIT_NONE] = None  # its place among the instance's fenced writes
    # True: the tries were used up on transient failures; False: the undo failed for good. None: sent by an
    # orchestration recorded before the field (its activity may run after an upgrade): the wording says it
    used_up_tries: Annotated[bool | None, OMIT_NONE] = None
    # the tries used up, the last one answered "still working on an earlier call with this key" by the undo's
    # service (``AgentReply.in_progress``): the undo is being done, its outcome still to come. None: not so, or an
    # orchestration recorded before the field
    still_working: Annotated[bool | None, OMIT_NONE] = None

    @property
    def transient(self) -> bool:
        """The undo's service kept failing transiently: ``fail_compensation`` asks if an outage did it."""
        if self.used_up_tries is not None:
            return self.used_up_tries
        return self.error is not None and _TRIES_USED_UP.search(self.error) is not None


# Before ``used_up_tries`` the compensation orchestration said an undo's tries were used up on transient
# failures only in the error it handed ``fail_compensation``; an input without the field is read that way.
_TRIES_USED_UP = re.compile(r" \(transient; \d+ tries used up\)$")


def tries_used_up(error: object, tries: int) -> str:
    return f"{error} (transient; {tries} tries used up)"


# --- an agent's reply, as the orchestrations read it --------------------------------------------------------


@dataclass(frozen=True)
class AgentAnswer:
    """An agent's reply to a step's request: its ``AgentReply`` event (the relay raises it validated,
    ``contracts.messages.AgentReply``) or the in-process agent activity's result, read once at the wait.

    Read exactly as the orchestrations read the reply dict before it was typed, because histories
    replay with it: ``outcome`` must be there (a reply without it fails the orchestration, as the
    ``reply["outcome"]`` of before did) and only ``"succeeded"`` succeeds; ``transient`` and
    ``dependencyOpen`` count when truthy; ``result`` and ``error`` are carried as they came (text,
    an object or null from any agent that keeps to ``AgentReply``; the activity that records a value
    that is not refuses it)."""

    succeeded: bool
    transient: bool = False
    dependency_open: bool = False
    result: Any = None  # a JSON value: the step's result (an object) when it succeeded
    error: Any = None  # a JSON value: why it failed (text)
    # the service answered its last call "still working on an earlier call with this key" (``inProgress``)
    in_progress: bool = False

    @property
    def step_result(self) -> Any:
        """The result a succeeded step records (an object; none is ``{}``)."""
        return self.result or {}


def reply_request_id(data: Any) -> Any:
    """The ``requestId`` a reply event answers (a wait skips replies to other requests unread)."""
    return _obj(data, "agent reply").get("requestId")


def parse_agent_answer(data: Any) -> AgentAnswer:
    d = _obj(data, "agent reply")
    if "outcome" not in d:
        raise ProtocolError("agent reply: 'outcome' is missing")
    return AgentAnswer(
        succeeded=d["outcome"] == "succeeded",
        transient=bool(d.get("transient")),
        dependency_open=bool(d.get("dependencyOpen")),
        result=d.get("result"),
        error=d.get("error"),
        in_progress=bool(d.get("inProgress")),
    )
