"""Activity triggers of the scheduler and the compensation orchestration: each is one line calling
plain code in ``scheduler_steps`` or ``compensation_steps``, with the typed protocol of
``contracts.activities`` parsed and serialised here, at the boundary. The parameters stay ``Any``
and the returns plain dicts: the Python worker takes no other annotation on an activity trigger."""

from typing import Any

import azure.durable_functions as df

from activities import compensation_steps
from activities import scheduler_steps as steps
from contracts import activities as protocol
from dependencies import get_context
from orchestrators import names

bp = df.Blueprint()


@bp.activity_trigger(input_name="data", activity=names.BEGIN_STEP)
def begin_step(data: Any) -> dict[str, Any]:
    return steps.begin_step(get_context(), protocol.BeginStepInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.SEND_AGENT_REQUEST)
def send_agent_request(data: Any) -> None:
    steps.send_agent_request(get_context(), protocol.SendAgentRequestInput.from_json(data))


@bp.activity_trigger(input_name="data", activity=names.RELEASE_FOR_RETRY)
def release_for_retry(data: Any) -> dict[str, Any]:
    return steps.release_for_retry(get_context(), protocol.ReleaseForRetryInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.FAIL_ORDER)
def fail_order(data: Any) -> dict[str, Any]:
    return steps.fail_order(get_context(), protocol.FailOrderInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.MARK_PROCESSED)
def mark_processed(data: Any) -> dict[str, Any]:
    return steps.mark_processed(get_context(), protocol.MarkProcessedInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.PUBLISH_STATUS)
def publish_status(data: Any) -> dict[str, Any] | None:
    unsent = steps.publish_status(get_context(), protocol.PublishStatusInput.from_json(data))
    return None if unsent is None else unsent.to_json()


@bp.activity_trigger(input_name="data", activity=names.SEND_ALERT)
def send_alert(data: Any) -> dict[str, Any] | None:
    given_up = steps.send_alert(get_context(), protocol.SendAlertInput.from_json(data))
    return None if given_up is None else given_up.to_json()


@bp.activity_trigger(input_name="data", activity=names.SETTLE_RETIRED_ATTEMPT)
def settle_retired_attempt(data: Any) -> dict[str, Any]:
    return steps.settle_retired_attempt(get_context(), protocol.SettleRetiredInput.from_json(data)).to_json()


# Compensation: the scheduler's hand-over and review pause, and the compensation orchestration's steps.


@bp.activity_trigger(input_name="data", activity=names.REQUEST_COMPENSATION)
def request_compensation(data: Any) -> dict[str, Any]:
    return compensation_steps.request_compensation(
        get_context(), protocol.RequestCompensationInput.from_json(data)
    ).to_json()


@bp.activity_trigger(input_name="data", activity=names.AWAIT_REVIEW)
def await_review(data: Any) -> dict[str, Any]:
    return compensation_steps.await_review(get_context(), protocol.AwaitReviewInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.CLOSE_REVIEW)
def close_review(data: Any) -> dict[str, Any]:
    return compensation_steps.close_review(get_context(), protocol.CloseReviewInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.LOAD_COMPENSATION)
def load_compensation(data: Any) -> dict[str, Any]:
    return compensation_steps.load_compensation(get_context(), protocol.LoadCompensationInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.BEGIN_UNDO)
def begin_undo(data: Any) -> dict[str, Any]:
    return compensation_steps.begin_undo(get_context(), protocol.BeginUndoInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.HOLD_UNDO)
def hold_undo(data: Any) -> dict[str, Any]:
    return compensation_steps.hold_undo(get_context(), protocol.HoldUndoInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.RELEASE_UNDO)
def release_undo(data: Any) -> dict[str, Any]:
    return compensation_steps.release_undo(get_context(), protocol.ReleaseUndoInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.RECORD_UNDO)
def record_undo(data: Any) -> dict[str, Any]:
    return compensation_steps.record_undo(get_context(), protocol.RecordUndoInput.from_json(data)).to_json()


@bp.activity_trigger(input_name="data", activity=names.FINISH_COMPENSATION)
def finish_compensation(data: Any) -> dict[str, Any]:
    return compensation_steps.finish_compensation(
        get_context(), protocol.FinishCompensationInput.from_json(data)
    ).to_json()


@bp.activity_trigger(input_name="data", activity=names.FAIL_COMPENSATION)
def fail_compensation(data: Any) -> dict[str, Any]:
    return compensation_steps.fail_compensation(get_context(), protocol.FailCompensationInput.from_json(data)).to_json()
