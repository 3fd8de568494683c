"""The agent core, pure of Azure: run one ``AgentRequest`` against its remote service.

Rules (the agent half of the Scheduler Agent Supervisor pattern):
- a request already past its deadline is dropped: no call, no reply (the scheduler has moved on);
- transient failures are retried with exponential backoff and jitter, at most
  ``AGENT_MAX_ATTEMPTS`` calls, and only while the next call can start before the deadline;
- every call carries the same idempotency key and the attempt as fencing token; an undo also names
  the forward key it cancels, which the service fences (no forward call with it is performed later);
- a call in flight may finish after the deadline, but then no reply is sent;
- a permanent failure is an error reply; transient failures that used up the budget are an error
  reply marked transient (the scheduler ends the attempt and the supervisor retries it later)."""

from __future__ import annotations

import json
import logging
import random
from typing import TYPE_CHECKING, Any

from adapters.clock import Clock
from adapters.remote.interface import RemoteCall, RemoteError, RemoteService
from contracts.messages import AgentReply, AgentRequest
from contracts.parsing import MAX_BODY_BYTES, InvalidMessage, parse
from domain.ids import idempotency_key
from domain.records import MAX_EXACT_INT, RESULT_LIMIT, inexact_integer, stored_size
from domain.retry import exponential_backoff
from domain.timefmt import to_text
from domain.workflow import Step, agent, step
from settings import Settings

if TYPE_CHECKING:
    from order_agents.circuit_gate import DependencyGate

log = logging.getLogger(__name__)


class UnknownAction(ValueError):
    """The request names a step or action this workflow does not have."""


def resolve_action(request: AgentRequest) -> tuple[Step, str]:
    """The workflow step and the service action a request asks for: ``do`` is the step's forward
    action, ``undo`` its compensating action."""
    try:
        the_step = step(request.step)
    except ValueError as exc:
        raise UnknownAction(str(exc)) from None
    if request.action == "do":
        return the_step, the_step.action
    if the_step.prepaid_action is not None and request.action == the_step.prepaid_action:
        return the_step, the_step.prepaid_action  # a prepaid order: capture against its notification
    if request.action == "undo":
        if the_step.undo_action is None:
            raise UnknownAction(f"step {the_step.name!r} has no undo action")
        return the_step, the_step.undo_action
    raise UnknownAction(f"action {request.action!r} is neither 'do' nor 'undo'")


def log_fields(request: AgentRequest, **more: Any) -> dict[str, Any]:
    return {
        "orderId": request.order_id,
        "step": request.step,
        "requestId": request.request_id,
        "attempt": request.attempt,
        **more,
    }


def _reply(request: AgentRequest, **fields: Any) -> AgentReply:
    return AgentReply(
        request_id=request.request_id,
        instance_id=request.instance_id,
        order_id=request.order_id,
        step=request.step,
        deadline=request.deadline,
        **fields,
    )


def _not_carriable(reply: AgentReply) -> str | None:
    """Why the reply relay (``parse``, as ``order_agents/reply_relay.py`` reads it) would refuse this
    reply (a result too large or nested too deep for a message), or None: it will be heard."""
    try:
        parse(reply.to_json().encode("utf-8"), {"AgentReply": AgentReply})
    except InvalidMessage as exc:
        return str(exc)
    return None


# A forward step's result is carried on in requests other agents read (with ``parse``: at most ``MAX_BODY_BYTES``):
# its undo data in the undo's request (``orchestrators/compensation.py``), the reservation in the shipment's
# (``domain.payloads``). Such a request is the result's fields and the rest: ids holding the order id four times (64
# characters at most), a round and a seq, a deadline, the longest ``shipTo`` (800 bytes): under 2 KiB; 4 KiB kept.
REQUEST_ROOM = 4 * 1024
CARRIED_LIMIT = MAX_BODY_BYTES - REQUEST_ROOM


def _not_kept(request: AgentRequest, result: Any) -> str | None:
    """Why a forward step's ``result`` cannot be kept or carried on (``unkept_forward_result``), or None.

    An undo's answer is never refused: it is kept only in part, bounded (``domain.compensation.undo_result``), and
    carried nowhere."""
    if request.action == "undo":
        return None
    refused = unkept_forward_result(result)
    return None if refused is None else f"{refused[0]}: {refused[1]}"


def unkept_forward_result(result: Any) -> tuple[str, str] | None:
    """Why a forward step's ``result`` cannot be kept or carried on, as (reason, what is wrong), or None.

    - ``ResultTooLarge``: more than ``RESULT_LIMIT`` bytes as the store sends it (one Cosmos DB item holds the
      record), or more than ``CARRIED_LIMIT`` bytes in a message (its undo's request or the next step's would be
      dead-lettered ``BodyTooLarge``).
    - ``ResultNotExact``: an integer past +-``MAX_EXACT_INT``, which the record would round
      (``adapters/remote/http_service.py`` refuses such answers where they enter, as ``read_outside_json``).

    The reply relay refuses a reply holding such a result too (one the app's agent never sends)."""
    size = stored_size(result)
    if size > RESULT_LIMIT:
        return RESULT_TOO_LARGE, (
            f"the result takes {size:,} bytes as the state record stores it (JSON, characters past ASCII escaped); "
            f"the limit is {RESULT_LIMIT:,}"
        )
    carried = len(json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if carried > CARRIED_LIMIT:
        return RESULT_TOO_LARGE, (
            f"the result takes {carried:,} bytes in a message; the requests that carry it on (its undo's, the next "
            f"step's) leave it {CARRIED_LIMIT:,}"
        )
    inexact = inexact_integer(result)
    if inexact is not None:
        path, number = inexact
        shown = str(number) if len(str(number)) <= 40 else f"of {len(str(abs(number))):,} digits"
        return RESULT_NOT_EXACT, (
            f"the integer {shown} at '{'.'.join(path)}' cannot be kept exactly (the state record keeps an integer "
            f"within +-{MAX_EXACT_INT}; a provider's 64-bit id must come as a string)"
        )
    return None


RESULT_TOO_LARGE = "ResultTooLarge"
RESULT_NOT_EXACT = "ResultNotExact"


def report_outcome(gate: DependencyGate, dependency: str, exc: RemoteError) -> None:
    """What a failed call tells the dependency's circuit (docs/supervisor.md, "What counts toward a circuit"):
    a permanent error is an answer (a success); "still working on an earlier call with this key" proves the
    service up, with no result; a timeout is half a failure (slow or hung, not known); any other transient
    failure (an error it answered, a connection refused) a failure."""
    if not exc.transient:
        gate.succeeded(dependency)
    elif exc.in_progress:
        gate.in_progress(dependency)
    else:
        gate.failed(dependency, timed_out=exc.timed_out)


def run_agent_request(
    request: AgentRequest,
    service: RemoteService,
    clock: Clock,
    settings: Settings,
    rng: random.Random,
    gate: DependencyGate,
    *,
    dependency: str | None = None,
) -> AgentReply | None:
    """Runs ``request`` against ``service``; returns the reply to send, or None when no reply may be sent (the
    deadline has passed).

    No call is made while the service's circuit is open (``gate``: dependency health shared across orders): the
    reply is then a transient failure with ``dependencyOpen`` set. ``dependency``: the service whose circuit guards
    the call, the handling agent's (a fallback agent calls its own provider, not the step's); None: the step's own
    agent's."""
    deadline = request.deadline
    if clock.now() >= deadline:
        log.warning(
            "request is past its deadline: dropped, no reply", extra=log_fields(request, deadline=to_text(deadline))
        )
        return None
    try:
        the_step, action = resolve_action(request)
    except UnknownAction as exc:
        log.error("request cannot be run: %s", exc, extra=log_fields(request))
        return _reply(request, outcome="failed", transient=False, error=str(exc))

    call = RemoteCall(
        service=dependency if dependency is not None else agent(the_step.agent).service,
        action=action,
        order_id=request.order_id,
        idempotency_key=request.idempotency_key,
        fencing_token=request.attempt,
        payload=request.payload,
        # An undo fences the step's forward key at the service: a forward call of unknown outcome
        # still in flight can no longer take effect after it (docs/compensation.md).
        fences_key=idempotency_key(request.order_id, the_step.name) if request.action == "undo" else None,
    )
    max_calls = settings.agent_max_attempts
    last_error = "no call made"
    still_working = False  # the last call was answered "still working on an earlier call with this key"
    for number in range(1, max_calls + 1):
        fields = log_fields(request, call=number, action=action, service=call.service)
        if not gate.admit(call.service):
            log.warning("dependency %s is open: failing fast, no call", call.service, extra=fields)
            return _reply(
                request,
                outcome="failed",
                transient=True,
                dependency_open=True,
                error=f"{call.service} unavailable (circuit open): not called",
            )
        if clock.now() >= deadline:
            # the health request took that long (throttled on the hot document, or pausing between lost races):
            # no new side effect after the deadline (a probe granted and not made lapses after a cool-down)
            log.warning("admitted after the deadline: no call, no reply", extra=fields)
            return None
        log.info("calling %s.%s (call %d of at most %d)", call.service, action, number, max_calls, extra=fields)
        try:
            result = service.call(call)
        except RemoteError as exc:
            report_outcome(gate, call.service, exc)
            if clock.now() >= deadline:
                log.warning("call failed after the deadline: no reply (%s)", exc, extra=fields)
                return None
            if not exc.transient:
                log.error("permanent failure: %s", exc, extra=fields)
                return _reply(request, outcome="failed", transient=False, error=str(exc))
            last_error, still_working = str(exc), exc.in_progress
            if number == max_calls:
                log.warning("transient failure, retry budget used up: %s", exc, extra=fields)
                break
            delay = exponential_backoff(number, settings.agent_retry_base, settings.agent_retry_max, rng)
            if clock.now() + delay >= deadline:
                log.warning("transient failure, no time left before the deadline to retry: %s", exc, extra=fields)
                break
            log.info("transient failure, retrying in %.3fs: %s", delay.total_seconds(), exc, extra=fields)
            clock.sleep(delay.total_seconds())
            continue
        gate.succeeded(call.service)
        if clock.now() >= deadline:
            log.warning("call succeeded after the deadline: no reply", extra=fields)
            return None
        reply = _reply(request, outcome="succeeded", result=result)
        refused = _not_carriable(reply) or _not_kept(request, result)
        if refused is not None:  # the relay would dead-letter it, or the record not keep it: say why instead
            log.error("succeeded, but the answer cannot be carried: %s", refused, extra=fields)
            # The call acted: an unknown outcome to the attempt (as a timeout), never a refusal, which would send
            # the step to the fallback provider and charge a second time. The supervisor retries under the same
            # key (the provider answers what it did) and, out of retries, escalates: compensation undoes it by its
            # key, or an operator is alerted.
            return _reply(
                request, outcome="failed", transient=True, error=f"the service's answer cannot be carried: {refused}"
            )
        log.info("succeeded", extra=fields)
        return reply
    return _reply(request, outcome="failed", transient=True, error=last_error, in_progress=still_working)
