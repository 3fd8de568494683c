"""Calling an activity's plain code the way its trigger does (``activities/blueprint.py``): the input
parsed from its JSON, the result serialised back, so tests keep speaking the wire's JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contracts import activities as protocol
from dependencies import AppContext

# The input type of each activity, by the name of its plain function.
INPUTS: dict[str, Any] = {
    "begin_step": protocol.BeginStepInput,
    "send_agent_request": protocol.SendAgentRequestInput,
    "release_for_retry": protocol.ReleaseForRetryInput,
    "fail_order": protocol.FailOrderInput,
    "mark_processed": protocol.MarkProcessedInput,
    "publish_status": protocol.PublishStatusInput,
    "request_compensation": protocol.RequestCompensationInput,
    "await_review": protocol.AwaitReviewInput,
    "close_review": protocol.CloseReviewInput,
    "load_compensation": protocol.LoadCompensationInput,
    "begin_undo": protocol.BeginUndoInput,
    "hold_undo": protocol.HoldUndoInput,
    "release_undo": protocol.ReleaseUndoInput,
    "record_undo": protocol.RecordUndoInput,
    "finish_compensation": protocol.FinishCompensationInput,
    "fail_compensation": protocol.FailCompensationInput,
}


def run(activity: Callable[[AppContext, Any], Any], ctx: AppContext, data: dict[str, Any]) -> Any:
    """``activity(ctx, Input.from_json(data))``, its result as JSON (None for the activities that
    answer nothing)."""
    result = activity(ctx, INPUTS[activity.__name__].from_json(data))
    return None if result is None else result.to_json()
