"""Whether what the app told the runner's operator came true (the report's ``operator_answers_broken``).

The operator (``localrun/operator.py``) keeps each final answer of the app's ops API (not a 5xx it tries again) as an
``OperatorAnswer``: a few fields, not the body. At the end each one that promises something is checked against the
runner's own evidence, never the app's word: the audited state writes (``Audit.transitions``, kept compactly for the
whole run), the final state documents as the report reads them (``simulation.report_fields``: the state and the
applied payment's ``notificationId``) and the broker (the ``orders`` queue and its dead letters). What each answer
promises is what the ops API's code and docs say (docs/deferral.md, docs/compensation.md, ``operations/actions.py``):

- discard 200 (``repeated`` too): the notification was never applied to any order (no ``PaymentNotified`` write
  naming it, no final record holding it) and its message is dead-lettered ``DiscardedByOperator`` (one answered
  ``deadLettered: false`` by the peek sweep later: the run does not end while it is still deferred);
- discard 409 saying the order exists (``order <id> exists now``: "the payment is applied to it", or its submission
  applied it): that order has a state record;
- resubmit 200: the operator's ``Resubmitted`` write (``Error`` -> ``Pending``) landed before the answer, and the
  order left ``Pending`` after it (claimed for a new attempt, or moved on: a cancel, the supervisor);
- cancel 200: the operator's cancel (``CompensationRequested``, "cancelled by operator ...") landed before the
  answer, and the order ended ``Compensated`` or ``CompensationFailed``;
- compensate 200: the operator's ``CompensationRequested`` landed before the answer, and a compensation round ended
  after it (``Compensating`` -> ``Compensated`` or ``CompensationFailed``: its log's outcome recorded);
- review 200: the answer was noted (``ReviewAnswered`` by the operator with that decision) or the review closed with
  it; the review was not closed with another decision nor asked again (a take-back); and the order moved on after the
  note (the attempt, the supervisor acting on the decision it left, or a cancel overtaking it); ``compensate`` took
  it to ``Compensating``, ``fail`` to ``Error`` (or a cancel to ``Compensating``).

Not checked, the evidence does not say it: that a review's ``retry`` or ``alternative`` re-ran the step through that
agent (a transition names no agent: any move after the note counts as acting on it), a resubmit's reset failure count
(a transition carries none: the order leaving ``Pending``, its claim, stands for the new attempt), and the refusals
(409 but the discard's above, 404), whose promise is "nothing was done" and which the other invariants cover (a write
that landed is audited like any other). A run cut by its horizon leaves an order that had
not yet done what it was promised excused while the order is still unsettled (``non_terminal`` counts it), and a
discarded message still deferred (the peek sweep's to dead-letter as recorded: the run waits for it, unless cut)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from domain.compensation import COMPENSATION_REQUESTED
from domain.deferral import DISCARDED
from domain.records import PAYMENT_NOTIFIED, SIDE_NOTES
from domain.review import REVIEW_ANSWERED, REVIEW_CLOSED, REVIEW_REQUESTED
from domain.states import ProcessState
from localrun.audit import Transition
from supervisor.operator import ACTION_EVENTS, operator_cancelled

RESUBMITTED = ACTION_EVENTS["resubmit"]  # the history event of ``domain.transitions.resubmit``
DECIDE_BY = ", decide by "  # ``domain.review.review_detail``'s, after the review's id
ROUND_ENDS = (ProcessState.COMPENSATED, ProcessState.COMPENSATION_FAILED)
UNSETTLED = (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.COMPENSATING)


@dataclass(frozen=True, slots=True)
class OperatorAnswer:
    """One final answer of the ops API to the runner's operator, reduced to what it promised."""

    at: datetime  # when the operator took the answer (true time; its write, if any, came before)
    order_id: str
    action: str  # resubmit | compensate | review | cancel | discard
    status: int
    by: str  # the operator's name, as the app records it (``OPS_LOCAL_PRINCIPAL``'s)
    repeated: bool = False
    sequence_number: int = 0  # discard: the deferred message
    notification_id: str = ""  # discard 200: the entry's ``notificationId``
    order_exists: bool = False  # discard 409: "order <id> exists now" (the payment is its order's)
    review_id: str = ""  # review: the review answered
    decision: str = ""  # review: the answer sent


@dataclass(frozen=True)
class Evidence:
    """The runner's own evidence at the end of a run."""

    transitions: Iterable[Transition]
    finals: Mapping[str, Mapping[str, Any]]  # state documents by order, as ``report_fields`` reduced them
    dead_lettered: Mapping[int, str]  # the ``orders`` dead letters: reason by sequence number
    deferred: frozenset[int]  # sequence numbers still deferred on ``orders``
    horizon_reached: bool = False


def promises(answers: Iterable[OperatorAnswer]) -> list[OperatorAnswer]:
    """The answers that promise something this module checks: every 200, and a discard's 409 for an order that
    exists."""
    return [a for a in answers if a.status == 200 or (a.action == "discard" and a.order_exists)]


def checked_counts(answers: Iterable[OperatorAnswer]) -> dict[str, int]:
    """How many answers of each action were checked (the report's ``operator_answers_checked``)."""
    counts: dict[str, int] = {}
    for answer in promises(answers):
        counts[answer.action] = counts.get(answer.action, 0) + 1
    return dict(sorted(counts.items()))


def broken_answers(answers: Iterable[OperatorAnswer], evidence: Evidence) -> list[str]:
    """Each answer whose promise the evidence contradicts, described."""
    checked = promises(answers)
    if not checked:
        return []
    orders = {a.order_id for a in checked}
    notifications = {a.notification_id for a in checked if a.notification_id}
    writes: dict[str, list[Transition]] = {}
    applied: dict[str, str] = {}  # notification -> the order a PaymentNotified write applied it to
    for t in evidence.transitions:
        if t.order_id in orders:
            writes.setdefault(t.order_id, []).append(t)
        if t.event == PAYMENT_NOTIFIED and notifications:
            nid = t.detail.partition(" ")[0]
            if nid in notifications:
                applied.setdefault(nid, t.order_id)
    for order_id, doc in evidence.finals.items():
        taken = (doc.get("payment") or {}).get("notificationId")
        if taken in notifications:
            applied.setdefault(str(taken), order_id)
    broken: list[str] = []
    for answer in checked:
        why = _broken(answer, writes.get(answer.order_id, []), evidence, applied)
        if why:
            said = f"{answer.action} answered {answer.status}{' repeated' if answer.repeated else ''} at {answer.at}"
            broken.append(f"{answer.order_id}: {said}, but {why}")
    return broken


def _broken(answer: OperatorAnswer, writes: list[Transition], evidence: Evidence, applied: Mapping[str, str]) -> str:
    final = evidence.finals.get(answer.order_id, {}).get("processState")
    cut = evidence.horizon_reached and final in {s.value for s in UNSETTLED}  # the run ended before it could
    if answer.action == "discard":
        return _discard(answer, evidence, applied)
    if answer.action == "resubmit":
        mine = _last(writes, answer, lambda t: t.event == RESUBMITTED and t.after is ProcessState.PENDING)
        if mine is None:
            return "no Resubmitted write of the operator's landed before it"
        if cut or any(t.at >= mine.at and t.before is ProcessState.PENDING and t.after is not t.before for t in writes):
            return ""
        return f"the order never left Pending after the resubmit (ended {final})"
    if answer.action in ("cancel", "compensate"):
        cancel = answer.action == "cancel"
        cancelled = operator_cancelled(answer.by, "")  # a cancel's detail: "cancelled by operator <who>: <why>"
        mine = _last(
            writes,
            answer,
            lambda t: t.event == COMPENSATION_REQUESTED and (t.detail.startswith(cancelled) or not cancel),
        )
        if mine is None:
            return f"no CompensationRequested write of the operator's {answer.action} landed before it"
        if cut:
            return ""
        if cancel:
            ended = final in {s.value for s in ROUND_ENDS}
            return "" if ended else f"the order ended {final}, not Compensated or CompensationFailed"
        if any(t.at >= mine.at and t.before is ProcessState.COMPENSATING and t.after in ROUND_ENDS for t in writes):
            return ""
        return f"no compensation round ended after it (the order ended {final})"
    if answer.action == "review":
        return _review(answer, writes, final, cut)
    return ""


def _last(writes: list[Transition], answer: OperatorAnswer, match: Any) -> Transition | None:
    """The operator's latest write matching ``match`` at or before the answer."""
    found = [t for t in writes if t.by == answer.by and t.at <= answer.at and match(t)]
    return found[-1] if found else None


def _discard(answer: OperatorAnswer, evidence: Evidence, applied: Mapping[str, str]) -> str:
    if answer.status != 200:  # a 409 saying the order exists
        return "" if answer.order_id in evidence.finals else "its order has no state record"
    wrong: list[str] = []
    taker = applied.get(answer.notification_id) if answer.notification_id else None
    if taker is not None:
        wrong.append(f"the payment {answer.notification_id} was applied to order {taker}")
    reason = evidence.dead_lettered.get(answer.sequence_number)
    owed = evidence.horizon_reached and answer.sequence_number in evidence.deferred  # the sweep's, cut off
    if reason != DISCARDED and not owed:
        if reason is not None:
            where = f"dead-lettered {reason}"
        elif answer.sequence_number in evidence.deferred:
            where = "still deferred"
        else:
            where = "not in the dead-letter queue"
        wrong.append(f"message #{answer.sequence_number} is {where}")
    return "; ".join(wrong)


def _review(answer: OperatorAnswer, writes: list[Transition], final: Any, cut: bool) -> str:
    prefix = f"{answer.review_id}: "
    closed = next((t for t in writes if t.event == REVIEW_CLOSED and t.detail.startswith(prefix)), None)
    if closed is not None and closed.detail != f"{prefix}{answer.decision}: answered by {answer.by}":
        return f"the review was closed otherwise ({closed.detail})"
    note = _last(
        writes,
        answer,
        lambda t: t.event == REVIEW_ANSWERED and t.detail.startswith(f"{prefix}{answer.decision}: "),
    )
    since = note or closed
    if since is None:
        return f"no note of the answer {answer.decision} to {answer.review_id} landed before it"
    # the moves after the note (or the close): side notes and the close are nobody acting on it
    later = [
        t
        for t in writes[next(i for i, t in enumerate(writes) if t is since) + 1 :]
        if t.event not in SIDE_NOTES and t.event != REVIEW_CLOSED
    ]
    if later and later[0].event == REVIEW_REQUESTED and f": {answer.review_id}{DECIDE_BY}" in later[0].detail:
        return f"the review was asked again after the answer (the note taken back at {later[0].at})"
    if cut:
        return ""
    if not later:
        return f"nothing acted on it (the order ended {final})"
    wanted = {
        "compensate": (ProcessState.COMPENSATING,),
        "fail": (ProcessState.ERROR, ProcessState.COMPENSATING),
    }.get(answer.decision)
    if wanted is not None and not any(t.after in wanted for t in later):
        return f"the order never went {' or '.join(s.value for s in wanted)} after it (ended {final})"
    return ""
