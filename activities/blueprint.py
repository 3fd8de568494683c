"""Activity triggers of the scheduler: each is one line calling plain code in ``scheduler_steps``."""

from typing import Any

import azure.durable_functions as df

from activities import scheduler_steps as steps
from dependencies import get_context
from orchestrators import names

bp = df.Blueprint()


@bp.activity_trigger(input_name="data", activity=names.LOAD_ORDER)
def load_order(data: dict[str, Any]) -> dict[str, Any]:
    return steps.load_order(get_context(), data)


@bp.activity_trigger(input_name="data", activity=names.BEGIN_STEP)
def begin_step(data: dict[str, Any]) -> dict[str, Any]:
    return steps.begin_step(get_context(), data)


@bp.activity_trigger(input_name="data", activity=names.SEND_AGENT_REQUEST)
def send_agent_request(data: dict[str, Any]) -> None:
    steps.send_agent_request(get_context(), data)


@bp.activity_trigger(input_name="data", activity=names.COMPLETE_STEP)
def complete_step(data: dict[str, Any]) -> dict[str, Any]:
    return steps.complete_step(get_context(), data)


@bp.activity_trigger(input_name="data", activity=names.RELEASE_FOR_RETRY)
def release_for_retry(data: dict[str, Any]) -> dict[str, Any]:
    return steps.release_for_retry(get_context(), data)


@bp.activity_trigger(input_name="data", activity=names.FAIL_ORDER)
def fail_order(data: dict[str, Any]) -> dict[str, Any]:
    return steps.fail_order(get_context(), data)


@bp.activity_trigger(input_name="data", activity=names.MARK_PROCESSED)
def mark_processed(data: dict[str, Any]) -> dict[str, Any]:
    return steps.mark_processed(get_context(), data)


@bp.activity_trigger(input_name="data", activity=names.PUBLISH_STATUS)
def publish_status(data: dict[str, Any]) -> None:
    steps.publish_order_status(get_context(), data)
