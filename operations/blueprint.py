"""The operator role's functions: the ops API under ``/api/ops/`` and the console (thin: plain code
in ``operations.views`` / ``actions`` / ``instances``).

Every route is ``authLevel: anonymous`` at the Functions level, because the caller is authenticated by
the platform (App Service authentication with Entra ID, infra/modules/functionapp.bicep) and
authorised here: ``operations.auth`` refuses every request when platform authentication is off,
answers 401 without a principal and 403 without the app role (``Orders.Read`` for GETs,
``Orders.Operate`` for POSTs). Actions are POSTs with a same-origin JSON body and no query parameter; a read takes
only the query parameters it reads (the list's, none for the summary and the order page), and the console's page and
files take any (they are the same files whatever it says, and a browser may add a ``?v=`` cache buster)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.ops_queries import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from adapters.cosmos.state_store import SeekKey
from adapters.servicebus.browse import TailHint
from dependencies import AppContext, get_context, get_context_async
from domain.states import ProcessState
from observability.events import app_event
from operations import actions, instances, views
from operations.auth import OPERATE_ROLE, PRINCIPAL_HEADER, READ_ROLE, Principal, Refusal, authenticate
from operations.console_assets import PAGE, console_asset, console_page
from operations.review_answer import answer_review
from operations.web import (
    MAX_CONTINUATION_CHARS,
    SECURITY_HEADERS,
    ActionBody,
    Reply,
    check_access,
    checked_order_id,
    checked_sequence_number,
    error,
    json_reply,
    list_parameters,
    no_parameters,
    no_query,
    page_size,
    parse_action_body,
    refused,
    same_origin_json,
    sign_in_redirect,
    store_token,
)

bp = df.Blueprint()
ANONYMOUS = func.AuthLevel.ANONYMOUS
# Per worker process: the newest alert's sequence number the last summary found, where the next one's
# search starts (the console polls the summary; lost on restart: the search then starts from the oldest).
ALERT_TAIL = TailHint()


def _response(reply: Reply) -> func.HttpResponse:
    headers = {**SECURITY_HEADERS, **reply.headers, "Content-Type": reply.content_type}
    return func.HttpResponse(reply.body, status_code=reply.status, headers=headers)


def _load(produce: Callable[[], Any]) -> Any:
    """``produce()``, or a 503 reply when the store is unavailable."""
    try:
        return produce()
    except StoreUnavailable as exc:
        return error(503, f"the state store is unavailable: {exc}")


# --- reads (Orders.Read) -------------------------------------------------------------------------


@bp.route(route="ops/summary", methods=["GET"], auth_level=ANONYMOUS)
def ops_summary(req: func.HttpRequest) -> func.HttpResponse:
    ctx = get_context()
    who = check_access(ctx.settings, req.headers, READ_ROLE)
    if isinstance(who, Reply):
        return _response(who)
    unknown = no_parameters(req.params, "the summary")
    if unknown is not None:
        return _response(unknown)
    found = _load(lambda: views.summary(ctx, ALERT_TAIL))
    return _response(found if isinstance(found, Reply) else json_reply(200, found))


@bp.route(route="ops/orders", methods=["GET"], auth_level=ANONYMOUS)
def ops_orders(req: func.HttpRequest) -> func.HttpResponse:
    ctx = get_context()
    who = check_access(ctx.settings, req.headers, READ_ROLE)
    if isinstance(who, Reply):
        return _response(who)
    query = list_parameters(req.params)
    if isinstance(query, Reply):
        return _response(query)
    state_text = query.get("state")
    try:
        state = ProcessState(state_text) if state_text else None
    except ValueError:
        known = ", ".join(s.value for s in ProcessState)
        return _response(error(400, f"unknown state {state_text!r}: one of {known}"))
    continuation = query.get("continuation") or None
    if continuation is not None and len(continuation) > MAX_CONTINUATION_CHARS:
        return _response(error(400, "continuation token too long"))
    after: SeekKey | None = None
    if continuation is not None:  # the token resumes the list it came from, never another
        resumed = store_token(state, continuation)
        if isinstance(resumed, Reply):
            return _response(resumed)
        after = resumed
    size = page_size(query.get("pageSize"), DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    if size is None:
        return _response(error(400, f"pageSize must be a whole number from 1 to {MAX_PAGE_SIZE}"))
    found = _load(lambda: views.order_page(ctx, state, size, after))
    return _response(found if isinstance(found, Reply) else json_reply(200, found))


@bp.route(route="ops/orders/{orderId}", methods=["GET"], auth_level=ANONYMOUS)
@bp.durable_client_input(client_name="client")
async def ops_order(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    ctx = await get_context_async()
    who = check_access(ctx.settings, req.headers, READ_ROLE)
    if isinstance(who, Reply):
        return _response(who)
    unknown = no_parameters(req.params, "the order page")
    if unknown is not None:
        return _response(unknown)
    order_id = checked_order_id(req.route_params.get("orderId"))
    if isinstance(order_id, Reply):
        return _response(order_id)
    found = await asyncio.to_thread(_load, lambda: views.order_detail(ctx, order_id))
    if isinstance(found, Reply):
        return _response(found)
    if found is None:
        return _response(error(404, f"no order {order_id}"))
    retention = ctx.settings.durable_history_retention
    cutoff = ctx.clock.now() - retention if retention > timedelta(0) else None
    purged = instances.purgeable(found["instances"], cutoff)
    pairs = [(i["kind"], i["instanceId"]) for i in found["instances"]]
    durable = await instances.describe_or_why_not(client, pairs, purged)
    return _response(json_reply(200, {**found, **durable}))


# --- actions (Orders.Operate) ----------------------------------------------------------------------


def _action_request(
    ctx: AppContext, req: func.HttpRequest, *, review: bool = False, by_hand: bool = False
) -> tuple[Principal, str, ActionBody] | Reply:
    """Who (from the principal), which order and the body, or the reply refusing the request."""
    who = check_access(ctx.settings, req.headers, OPERATE_ROLE)
    if isinstance(who, Reply):
        return who
    unfit = same_origin_json(req.url, req.headers) or no_query(req.params)
    if unfit is not None:
        return unfit
    order_id = checked_order_id(req.route_params.get("orderId"))
    if isinstance(order_id, Reply):
        return order_id
    body = parse_action_body(req.get_body(), review=review, by_hand=by_hand)
    if isinstance(body, Reply):
        return body
    return who, order_id, body


def _audited(ctx: AppContext, req: func.HttpRequest, action: str, reply: Reply) -> func.HttpResponse:
    """``reply`` to an action request, logged (``OperatorRequest``) when a principal is known, taken or refused:
    who by name and by object id (a display name is neither unique nor fixed), the action, the order and the
    status; a discard also the deferred message's sequence number (an order may have several: which one was
    discarded; None when the route's is malformed). A request with no principal names nobody (the platform's
    request log has it)."""
    who = authenticate(ctx.settings, req.headers)  # a principal refused for want of the role is one too
    if isinstance(who, Principal):
        order_id = req.route_params.get("orderId")
        order = order_id if isinstance(checked_order_id(order_id), str) else None
        which: dict[str, Any] = {}
        of = ""
        if action == "discard":
            seq = checked_sequence_number(req.route_params.get("sequenceNumber"))
            which["sequenceNumber"] = seq if isinstance(seq, int) else None
            of = f" #{seq}" if isinstance(seq, int) else " (malformed sequence number)"
        app_event(
            "OperatorRequest",
            f"{action}{of} of order {order or '(malformed id)'} by {who.name} ({who.object_id or who.source}): "
            f"{reply.status}",
            logging.INFO if reply.status == 200 else logging.WARNING,
            orderId=order,
            action=action,
            operator=who.name,
            operatorId=who.object_id,
            status=reply.status,
            **which,
        )
    return _response(reply)


def _act(
    req: func.HttpRequest,
    action: str,
    move: Callable[[AppContext, str, str, ActionBody], Reply],
    *,
    by_hand: bool = False,
) -> func.HttpResponse:
    ctx = get_context()
    checked = _action_request(ctx, req, by_hand=by_hand)
    if isinstance(checked, Reply):
        return _audited(ctx, req, action, checked)
    who, order_id, body = checked
    return _audited(ctx, req, action, move(ctx, order_id, who.name, body))


@bp.route(route="ops/orders/{orderId}/resubmit", methods=["POST"], auth_level=ANONYMOUS)
def ops_resubmit(req: func.HttpRequest) -> func.HttpResponse:
    return _act(req, "resubmit", lambda ctx, order_id, who, body: actions.resubmit(ctx, order_id, who, body.reason))


@bp.route(route="ops/orders/{orderId}/cancel", methods=["POST"], auth_level=ANONYMOUS)
def ops_cancel(req: func.HttpRequest) -> func.HttpResponse:
    return _act(req, "cancel", lambda ctx, order_id, who, body: actions.cancel(ctx, order_id, who, body.reason))


@bp.route(route="ops/orders/{orderId}/compensate", methods=["POST"], auth_level=ANONYMOUS)
def ops_compensate(req: func.HttpRequest) -> func.HttpResponse:
    return _act(
        req,
        "compensate",
        lambda ctx, order_id, who, body: actions.compensate(ctx, order_id, who, body.reason, body.undone_by_hand),
        by_hand=True,
    )


@bp.route(route="ops/orders/{orderId}/deferred/{sequenceNumber}/discard", methods=["POST"], auth_level=ANONYMOUS)
def ops_discard_deferred(req: func.HttpRequest) -> func.HttpResponse:
    def move(ctx: AppContext, order_id: str, who: str, body: ActionBody) -> Reply:
        seq = checked_sequence_number(req.route_params.get("sequenceNumber"))
        return seq if isinstance(seq, Reply) else actions.discard_deferred(ctx, order_id, seq, who, body.reason)

    return _act(req, "discard", move)


@bp.route(route="ops/orders/{orderId}/review", methods=["POST"], auth_level=ANONYMOUS)
@bp.durable_client_input(client_name="client")
async def ops_review(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    ctx = await get_context_async()
    checked = _action_request(ctx, req, review=True)
    if isinstance(checked, Reply):
        return _audited(ctx, req, "review", checked)
    who, order_id, body = checked
    return _audited(ctx, req, "review", await answer_review(ctx, client, who.name, order_id, body))


# --- the console --------------------------------------------------------------------------------


def _console_guard(req: func.HttpRequest, *, page: bool) -> Reply | None:
    """The console's files hold no data, but they are served to a signed-in caller only (any role: what
    the page shows needs ``Orders.Read``). Not signed in: the page sends the browser to the platform's
    sign-in, back to the console afterwards; its script and style are 401. Signed in, with a principal the
    app cannot use: 401 saying why (sent to sign in, the browser would come back with the same, without end).
    An app that cannot authenticate anyone (platform authentication off and no local principal) says so: 503."""
    found = authenticate(get_context().settings, req.headers)
    if not isinstance(found, Refusal):
        return None
    if found.status == 401 and page and not req.headers.get(PRINCIPAL_HEADER):
        return sign_in_redirect(req.url)
    return refused(found)


@bp.route(route="ops/console", methods=["GET"], auth_level=ANONYMOUS)
def ops_console(req: func.HttpRequest) -> func.HttpResponse:
    return _response(_console_guard(req, page=True) or console_page(req.url))


@bp.route(route="ops/console/{asset}", methods=["GET"], auth_level=ANONYMOUS)
def ops_console_asset(req: func.HttpRequest) -> func.HttpResponse:
    name = str(req.route_params.get("asset") or "")
    return _response(_console_guard(req, page=name == PAGE) or console_asset(req.url, name))
