"""Telling the submitter: status updates are sent by an activity after the fenced write that
made them true, never inside it. A failed send then cannot fail or undo the write, and it never
holds a deadline:

- a progress status (``Processing``, ``Compensating``) is tried once: the attempt or round goes on
  whatever happens (the next status supersedes it, and waiting for a broken reply queue would eat
  the start grace or the round's deadline);
- a final status (``Completed``, ``Failed``, ``Compensated``, ``CompensationFailed``, and any status
  handed to the courier) is sent after the write that ended the order, when nothing holds a
  deadline any more, and retried on durable timers until it is sent or ``FINAL_RETRY_DELAYS`` are
  used up (about six hours): the orchestration instance is the outbox, kept by Durable across
  restarts. The MessageId (order + status + attempt) collapses any repeat. Tries that failed sending the
  ``Received`` the record still owes before the status have ``FINAL_RETRY_DELAYS`` of their own
  (``_final_on_timers``): the status keeps its own count once that ``Received`` is out;
- a reply queue that does not exist or refuses this app (``QueueNotFound``) is alerted once per queue by
  the activity, which answers ``StatusRefused`` (not an exception: the orchestration cannot tell one
  from another). Such a queue may take the status minutes later (a role assignment takes minutes to
  propagate; a submitter may delete and recreate its queue), so a refused final status is tried again on
  the same timers while they stay within ``REFUSED_RETRY_WINDOW`` of its first try (the last delay cut
  to end there), then dropped: no ``StatusUndelivered`` (the queue's ``ReplyQueueUnavailable`` alert is
  the operator's signal, and a queue gone for good costs a few tries per status, never an alert per
  order). A progress status is not tried again, nor is a refused ``Failed`` or ``CompensationFailed``
  (``OWED_BY_THE_RECORD``): the supervisor's owed sweep tries it again (``supervisor.owed``), saying first
  the ``Received`` the record may still owe, and sending nothing once an operator acted on the order; tried
  here, the queue taking sends again let it reach the submitter after the order was resubmitted (and before
  ``Received``, until the activity said an owed ``Received`` first: ``notifications.received.say_before_status``).
  An answer recorded before ``StatusRefused`` existed is None (sent, or nothing to send), and replays as it was
  recorded;
- a ``Failed`` or ``CompensationFailed`` is sent only while its order stands where the failure left it: each try
  reads the record, and one an operator moved on since (resubmitted, compensated again: the next attempt or round
  speaks) is answered None with nothing sent (``activities.scheduler_steps.failure_moved_on``, ``StatusMovedOn``),
  so the timers stop; a later try delivered the old failure after the resubmitted order's ``Processing``.

A last try (``lastTry``) that fails without running its give-up (its worker killed at ``functionTimeout``, a worker
crash the extension reports as the activity's failure, an unexpected error before it) alerted nothing: the
orchestration ended and the status was dropped unheard. So the last try of an instance started since
(``ANSWERS_GIVE_UP_INPUT``) answers its give-up (``StatusGivenUp``: alerted, the timers end), and one that fails is
repeated after each of ``LAST_TRY_REPEATS`` (such a death is usually a one-off); when every repeat failed too the
orchestration logs ``LastTryLost`` itself (ERROR, paged by the ``alertsUndelivered`` rule; ``last_try_lost``). An
instance started before lacks the flag and replays as recorded: its last try raises after its give-up and any
failure of it ends the timers (the defect kept for its life).

``deliver_status`` is the courier orchestration: code that has no durable timer of its own (the
intake) hands it a status whose send failed, and it delivers it the same way. A pending-cap refusal's
``Rejected`` it delivers only while the refusal stands: each try of its activity first looks for the
order's state record, and one found (a later submission of the order accepted) ends the courier with
nothing sent (``activities.scheduler_steps.refusal_superseded``)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import azure.durable_functions as df

from contracts.activities import PublishStatusInput, ReceivedUnsent, StatusGivenUp, parse_publish_status
from contracts.messages import StatusName
from orchestrators import names
from orchestrators.logged import log_error_once

PROGRESS_STATUSES = frozenset({"Processing", "Compensating"})
# The statuses that never wait for an owed ``Received`` (``notifications.received``): itself, and a refusal (told for
# a submission never accepted). Their timers have no tries of a ``Received`` to count (``_final_on_timers``).
NOT_AFTER_RECEIVED = frozenset({"Received", "Rejected"})
# The statuses a failure write owes on the record (``supervisor/owed.py``, ``OWED_BY_EVENT``): the supervisor's
# sweep sends them until acknowledged, with no end (alerting ``NotificationsStuck`` once an hour meanwhile), so
# the timers running out here is not the app giving up on them: their last try does not say ``lastTry``.
OWED_BY_THE_RECORD = frozenset({"Failed", "CompensationFailed"})
FINAL_RETRY_DELAYS = (
    timedelta(seconds=5),
    timedelta(seconds=30),
    timedelta(minutes=2),
    timedelta(minutes=5),
    timedelta(minutes=10),
    timedelta(minutes=30),
    timedelta(hours=1),
    timedelta(hours=2),
    timedelta(hours=2),
)
# How long a status a reply queue refuses (``QueueNotFound``: missing, or this app not allowed to send to it)
# is tried again, from its first try, before it is dropped: long enough for a role assignment to propagate
# (minutes in Azure: a submitter that grants this app ``Azure Service Bus Data Sender`` on its queue just before
# submitting is refused meanwhile) or for a queue deleted and created again. Progress statuses are not retried.
# The orchestrations' timers (``FINAL_RETRY_DELAYS`` within it), the intake's courier and a ``Received`` owed on
# the record (``notifications.received``) count it from the first try; the supervisor's owed sweep from the
# failure write (``supervisor.owed.send_owed``, in its resend windows).
REFUSED_RETRY_WINDOW = timedelta(minutes=45)
# The input key of the orchestrations started since a final status's (an alert's) last try answers its give-up
# (``StatusGivenUp``, ``AlertGivenUp``) and a last try that fails without answering is repeated (``LAST_TRY_REPEATS``):
# the attempts (``AttemptInput.answers_give_up``), the compensation rounds and both couriers. An instance whose input
# lacks it replays as its history holds: its last try raises after its give-up, and any failure of it ends the tries.
ANSWERS_GIVE_UP_INPUT = "answersGiveUp"
# The waits before each repeat of a last try that failed without answering (its worker killed at ``functionTimeout``,
# a crash, an unexpected error): usually a one-off, tried again soon; after the last, ``LastTryLost`` is logged.
LAST_TRY_REPEATS = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15))
# "lost": the last try and every repeat of it failed without answering (a last try asked to answer its give-up only)
type Tried = Literal["done", "failed", "refused"]
type Tries = Tried | Literal["lost"]


def answers_give_up(context: df.DurableOrchestrationContext) -> bool:
    """Whether the instance was started with ``ANSWERS_GIVE_UP_INPUT`` (fixed for its life)."""
    started = context.get_input()
    return isinstance(started, dict) and started.get(ANSWERS_GIVE_UP_INPUT) is True


def last_try_lost(context: df.DurableOrchestrationContext, activity: str, message: str, **fields: Any) -> None:
    """Logs ``LastTryLost`` (ERROR; the ``alertsUndelivered`` rule pages on it): the last try of ``activity`` and every
    repeat of it failed without running its give-up, so nothing alerted what it carried and nothing tries again.
    Logged by the orchestration, once: not while it replays (``orchestrators.logged``)."""
    log_error_once(
        context,
        "LastTryLost",
        f"{message}: its last try failed {1 + len(LAST_TRY_REPEATS)} times without running its give-up "
        f"(killed at functionTimeout, a worker crash, an unexpected error); nothing tries again",
        activity=activity,
        tries=1 + len(LAST_TRY_REPEATS),
        **fields,
    )


def refusal_retried(since: datetime, now: datetime) -> bool:
    """Whether a final status (or an owed ``Received``) first tried at ``since`` and refused by its reply queue
    now is worth another try."""
    return now - since < REFUSED_RETRY_WINDOW


class KnowsReplyTo(Protocol):
    """An orchestration's plan (``OrderPlan`` from its input, ``CompensationPlan`` from its load
    activity): the record's ``replyTo``, if read."""

    @property
    def reply_to(self) -> str | None: ...

    @property
    def reply_to_known(self) -> bool: ...


def call_publish_status(
    context: df.DurableOrchestrationContext,
    order_id: str,
    status: StatusName,
    attempt: int,
    reason: Any = None,
    *,
    plan: KnowsReplyTo | None = None,
) -> Generator[Any, Any, bool]:
    """Calls the ``publish_status`` activity (``notifications.status.publish_status``) for one status
    update, once for a progress status, on durable timers for a final one; True once sent (or there
    is no reply queue), False if it was not (failed, or refused past ``REFUSED_RETRY_WINDOW``).
    ``plan`` is the orchestration's plan: its ``replyTo`` (the record's) saves the activity a read,
    and an order submitted without one costs no activity at all."""
    known = plan is not None and plan.reply_to_known
    reply_to = plan.reply_to if plan is not None else None
    if known and reply_to is None:
        return True
    payload = PublishStatusInput(
        order_id=order_id,
        status=status,
        attempt=attempt,
        reply_to=reply_to,
        reply_to_known=known,
        reason=None if reason is None else str(reason)[:500],
    )
    delays = () if status in PROGRESS_STATUSES else FINAL_RETRY_DELAYS
    return (yield from _send(context, payload, delays)) == "done"


def deliver_status(context: df.DurableOrchestrationContext) -> Generator[Any, Any, dict[str, Any]]:
    """The courier: delivers the status in its input (``orderId``, ``status``, ``attempt``,
    ``replyTo``, ``reason``, ``variant``) like a final status. ``Sent``: its activity succeeded, which
    includes nothing to send (no reply queue, or a ``Rejected`` superseded by a submission of the order
    accepted since); ``Refused``: its reply queue still refused this app ``REFUSED_RETRY_WINDOW`` after the
    first try; ``GaveUp``: the tries failed (alerted ``StatusUndelivered``, or ``LastTryLost``)."""
    payload = replace(PublishStatusInput.from_json(context.get_input()), answers_give_up=None)  # the instance's: below
    tried = yield from _send(context, payload, FINAL_RETRY_DELAYS)
    return {"result": {"done": "Sent", "failed": "GaveUp", "refused": "Refused"}[tried], "status": payload.status}


def _send(
    context: df.DurableOrchestrationContext, payload: PublishStatusInput, delays: tuple[timedelta, ...]
) -> Generator[Any, Any, Tried]:
    if delays and payload.status not in OWED_BY_THE_RECORD:  # given up after its last try: nothing tries again
        tried = yield from _final_on_timers(context, payload, delays)
        if tried != "lost":
            return tried
        last_try_lost(
            context,
            names.PUBLISH_STATUS,
            f"order {payload.order_id}: status {payload.status} (attempt {payload.attempt}) not sent nor alerted",
            orderId=payload.order_id,
            status=payload.status,
            attempt=payload.attempt,
            replyTo=payload.reply_to,
            alertKind="StatusUndelivered",  # the alert its give-up would have raised, and its summary (the rule's
            summary=_lost_summary(payload),  # description sends the operator to alertKind, orderId and summary)
        )
        return "failed"
    # a progress status (tried once), or a Failed or CompensationFailed: tried again by the owed sweep once refused,
    # and sent by it until acknowledged after these timers (the module's docstring)
    tried = yield from call_on_timers(
        context,
        names.PUBLISH_STATUS,
        payload.to_json(),
        delays,
        refused=lambda answer: parse_publish_status(answer) is not None,
        refused_for=timedelta(0) if payload.status in OWED_BY_THE_RECORD else REFUSED_RETRY_WINDOW,
    )
    return "failed" if tried == "lost" else tried  # never lost: no last try here


def _lost_summary(payload: PublishStatusInput) -> str:
    """What ``LastTryLost`` tells the operator of a status, as its give-up's ``StatusUndelivered`` alert would have:
    the order, the status, its queue, and the ``Received`` before it its try would have said first (when the record
    still owes it: the orchestration cannot tell, and no try ran to say it)."""
    received = "" if payload.status in NOT_AFTER_RECEIVED else " (nor the Received before it, if the record owes it)"
    queue = f"{payload.reply_to!r}" if payload.reply_to else "its replyTo"
    return (
        f"order {payload.order_id}: status {payload.status}{received} was neither sent to {queue} nor alerted: "
        "its last try died on every repeat"
    )


def _final_on_timers(
    context: df.DurableOrchestrationContext, payload: PublishStatusInput, delays: tuple[timedelta, ...]
) -> Generator[Any, Any, Tries]:
    """A status given up after its last try (``lastTry``), tried on two counts of ``delays``: its own tries (a failed
    send or read, a refusal) and those that could not send the ``Received`` its record still owes before it (answered
    ``ReceivedUnsent``). Each count waits ``delays`` in turn and ends after its last try: the status's own with the
    status given up, the ``Received``'s with both given up (the activity alerts them: ``receivedTriesLeft`` 0). So a
    ``Received`` that failed most of the tries (a queue full for a while) leaves the status its full count once it is
    out; before, the tries it spent were the status's, and a status tried four times after its ``Received`` went out
    was given up (red team, status queue full 25 minutes and 25 % failed sends, 200 orders, seed 2). Bounded: at most
    twice the tries, about twelve hours; a queue full for good still gives both up after the ``Received``'s count.
    Refusals count as the status's own and stop ``REFUSED_RETRY_WINDOW`` after the first try. A history recorded
    before the second count has no ``ReceivedUnsent``: one count, as it was recorded.

    The last try of an instance started with ``ANSWERS_GIVE_UP_INPUT`` asks the activity to answer its give-up
    (``StatusGivenUp``: ``failed``); one that fails did not run it and is repeated after each of ``LAST_TRY_REPEATS``
    (``lost`` when every repeat failed too: the caller logs it)."""
    alone = payload.status in NOT_AFTER_RECEIVED
    answers = True if answers_give_up(context) else None
    own = unsent = died = 0
    waited = timedelta(0)
    while True:
        last = True if own == len(delays) else None
        data = replace(
            payload,
            last_try=last,
            received_tries_left=None if alone else len(delays) - unsent,
            answers_give_up=answers if last else None,
        )
        try:
            answer = yield context.call_activity(names.PUBLISH_STATUS, data.to_json())
        except Exception:
            if last and answers:  # the last try failed without running its give-up (it would have answered)
                died += 1
                if (repeat := _wait_after(died, LAST_TRY_REPEATS)) is None:
                    return "lost"
                wait = repeat
            else:
                own += 1
                if (next_try := _wait_after(own, delays)) is None:
                    return "failed"
                wait = next_try
        else:
            unsent_or_refused = parse_publish_status(answer)
            if unsent_or_refused is None:
                return "done"
            if isinstance(unsent_or_refused, StatusGivenUp):  # given up and alerted by the activity
                return "failed"
            if isinstance(unsent_or_refused, ReceivedUnsent):
                unsent += 1
                if unsent > len(delays):
                    return "failed"
                wait = delays[unsent - 1]
            else:
                own += 1
                if own > len(delays) or waited >= REFUSED_RETRY_WINDOW:
                    return "refused"
                wait = min(delays[own - 1], REFUSED_RETRY_WINDOW - waited)
        yield context.create_timer(context.current_utc_datetime + wait)
        waited += wait


def _wait_after(tries: int, waits: tuple[timedelta, ...]) -> timedelta | None:
    """The wait after the ``tries``-th failed try of a count of ``waits``; None once they are used up."""
    return waits[tries - 1] if tries <= len(waits) else None


def call_on_timers(
    context: df.DurableOrchestrationContext,
    activity: str,
    data: Any,
    delays: tuple[timedelta, ...],
    *,
    last: Any = None,
    refused: Callable[[Any], bool] | None = None,
    refused_for: timedelta = timedelta(0),
    gave_up: Callable[[Any], bool] | None = None,
) -> Generator[Any, Any, Tries]:
    """Calls ``activity`` with ``data``, again after each of ``delays`` (a durable timer) while it fails;
    ``done`` once it succeeded, ``failed`` when the delays are used up. ``last``: the data of the last try
    instead (it says so, and the activity makes a failure then visible: nothing will try again).
    ``refused``: tells an answer that did not do the work though the activity succeeded; such a try is
    tried again like a failed one while the delays waited stay within ``refused_for`` (the delay that
    would pass it is cut to end there), then the call is ``refused``.
    ``gave_up``: tells the last try's answer that it gave up (made its failure visible: ``failed``); the last try then
    answers so, and one that fails did not run its give-up: it is repeated after each of ``LAST_TRY_REPEATS``, then
    the call is ``lost`` (the caller logs ``last_try_lost``)."""
    waited = timedelta(0)
    tries = iter((*delays, None))
    delay = next(tries)
    died = 0
    while True:
        try:
            answer = yield context.call_activity(activity, data if delay is not None or last is None else last)
        except Exception:
            if delay is not None:
                wait = delay
            elif gave_up is None:
                return "failed"
            else:  # the last try failed without running its give-up (it would have answered): repeated
                died += 1
                if (repeat := _wait_after(died, LAST_TRY_REPEATS)) is None:
                    return "lost"
                wait = repeat
        else:
            if delay is None and gave_up is not None and gave_up(answer):
                return "failed"
            if refused is None or not refused(answer):
                return "done"
            if delay is None or waited >= refused_for:
                return "refused"
            wait = min(delay, refused_for - waited)
        yield context.create_timer(context.current_utc_datetime + wait)
        waited += wait
        if delay is not None:
            delay = next(tries)
