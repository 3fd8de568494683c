"""An operator's answer to a review pause (``POST /api/ops/orders/{orderId}/review``), as plain async
code over the app's context and its durable client: find the review the answer names
(``actions.review_to_answer``), ask the Durable backend whether the paused attempt runs and which
scheduler version it is (``instances.attempt_state``), note the answer (one conditional write), then
raise ``ReviewDecision`` with the app's own client (operators never hold a system key).

What the version changes (docs/compensation.md, "Human review"): a retired version takes no answer;
``process_order_v3``, which takes its default at the deadline without closing the review, takes none
in its last minute nor a late repost; ``_v4`` closes the review at its deadline and takes a note made
before the close. Only a note the request itself just wrote is taken back, when its raise finds the
attempt definitely gone; a note from an earlier request stands, and the supervisor carries it out."""

from __future__ import annotations

import asyncio
from typing import Any

from adapters.cosmos.errors import StoreUnavailable
from adapters.durable_client import bounded
from dependencies import AppContext
from domain.ids import url_instance_id
from domain.records import StateRecord
from operations import actions, instances
from operations.web import ActionBody, Reply, error
from orchestrators.names import REVIEW_CLOSING_SCHEDULERS, REVIEW_DECISION_EVENT, REVIEW_TAKING_SCHEDULERS


def refused_by_version(
    ctx: AppContext, order_id: str, target: actions.ReviewTarget, attempt: instances.AttemptState
) -> Reply | None:
    """The refusal an attempt's version calls for (see the module), or None."""
    if not attempt.takes_events:
        return None
    if attempt.name not in REVIEW_TAKING_SCHEDULERS:
        return error(
            409,
            f"the paused attempt {target.pending.instance_id} runs {attempt.name or 'an unknown version'}, which no "
            "longer takes answers: at its next replay it releases the order, which the supervisor retries",
        )
    if attempt.name in REVIEW_CLOSING_SCHEDULERS:
        return None
    if target.late:  # process_order_v3: its timer took the default
        return actions.deadline_passed(order_id, target.pending, target.noted)
    return actions.too_close_to_deadline(ctx, order_id, target.pending) if target.noted is None else None


async def read_latest(ctx: AppContext, record: StateRecord) -> bool | Reply:
    """Whether ``record`` is the latest version (``actions.read_is_latest``), or a 503 when the store is
    unavailable."""
    try:
        return await asyncio.to_thread(actions.read_is_latest, ctx, record)
    except StoreUnavailable as exc:
        return error(503, f"the state store is unavailable: {exc}; post the same answer again")


async def answer_review(
    ctx: AppContext, client: Any, operator_name: str, order_id: str, body: ActionBody, *, again: bool = False
) -> Reply:
    """``again``: this is the second pass of a request whose record changed under it (its note found the same
    answer noted meanwhile, or the version it read was not the latest)."""
    action, review_id = str(body.action), str(body.review_id)
    target = await asyncio.to_thread(actions.review_to_answer, ctx, order_id, review_id, action, operator_name)
    if isinstance(target, Reply):
        return target
    instance = target.answer.instance_id if isinstance(target, actions.AnswerActedOn) else target.pending.instance_id
    try:
        attempt = await instances.attempt_state(client, instance)
    except Exception as exc:  # the SDK raises plain Exceptions for the extension's HTTP errors
        return error(503, f"the Durable backend cannot say whether {instance} runs: {exc}")
    if isinstance(target, actions.AnswerActedOn):  # posted again after the attempt acted on an event
        return actions.acted_on(order_id, target, attempt.name in REVIEW_CLOSING_SCHEDULERS)
    refused = refused_by_version(ctx, order_id, target, attempt)
    if refused is not None:
        return refused
    pending, noted = target.pending, target.noted
    # An attempt that is gone cannot take an answer: refuse one before the record notes anything. A note
    # of the same answer left by an earlier try stands (its operator may have been told 200): the
    # supervisor carries it out when it recovers the attempt. That 200 is said on the record alone, so only once the
    # version read is known the latest: another instance's replica may not have the note's take-back yet.
    if not attempt.takes_events:
        if noted is None:
            return error(409, f"the paused attempt {pending.instance_id} is not running: it cannot take the answer")
        latest = await read_latest(ctx, target.record)
        if latest is False and not again:  # judged again on a read of its own
            return await answer_review(ctx, client, operator_name, order_id, body, again=True)
        if latest is not True:
            return latest if isinstance(latest, Reply) else actions.read_behind(order_id, "answer")
        return actions.left_to_supervisor(order_id, target.record, noted, ctx.settings.supervisor_grace)
    if noted is None:
        claimed = await asyncio.to_thread(
            actions.claim_answer, ctx, order_id, pending, operator_name, action, body.reason
        )
        if isinstance(claimed, actions.NotedMeanwhile):
            if again:  # noted meanwhile twice over (it cannot be: a note is never noted again); say so
                return actions.read_behind(order_id, "answer")
            # the same answer noted by another request since this one read the review (a double click): answer
            # as for that answer posted again (its event raised again: the attempt takes the first it gets)
            return await answer_review(ctx, client, operator_name, order_id, body, again=True)
        if isinstance(claimed, Reply):
            return claimed
        operator, reason = operator_name, body.reason
    else:  # the same answer is noted already (its delivery was uncertain): raise its event again
        claimed, operator, reason = target.record, noted.operator, noted.reason
    # A late note's event comes after the timer and is ignored: the attempt's close takes the note itself.
    try:
        await bounded(
            client.raise_event(
                url_instance_id(pending.instance_id),  # built by the app; escaped all the same (domain.ids)
                REVIEW_DECISION_EVENT,
                actions.decision_event(pending, action, operator, reason),
            )
        )
    except Exception as exc:  # the SDK raises plain Exceptions: 404/410 and a lost response alike
        if await instances.gone_after_failed_raise(client, pending.instance_id, exc):
            if noted is not None:  # noted by an earlier request: it stands (see above), if read from the latest
                latest = await read_latest(ctx, target.record)
                if latest is not True:
                    return latest if isinstance(latest, Reply) else actions.read_behind(order_id, "answer")
                return actions.left_to_supervisor(order_id, claimed, noted, ctx.settings.supervisor_grace)
            return await asyncio.to_thread(actions.take_back_answer, ctx, order_id, pending, operator, action, str(exc))
        return actions.delivery_uncertain(order_id, pending, operator, action, exc)
    return actions.answered(order_id, claimed, pending, operator, action, reason)
