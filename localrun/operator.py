"""The runner's operator (profile ``operator``, ``localrun.profile.OperatorPlan``): a person at the ops API who,
at a random simulated delay after an order reaches ``Error`` or ``CompensationFailed`` or asks for a review,
resubmits it, compensates it (again) or answers the review. It acts through the app's own HTTP functions,
as ``localrun serve``'s console does: each request goes to the runner's host (``LocalHost.submit_http``) and
is invoked through the Functions runtime on the real worker, signed in as ``OPERATOR`` (the app's
``OPS_LOCAL_PRINCIPAL``, set for a run with an operator only). A review answer reads the order first
(``GET ops/orders/{id}``) for the id of the review it answers. Its own generator (``seed:operator``): a run
with no operator draws nothing more, and is the same run as before.

With ``cancel_rate``, it also cancels orders (``POST ops/orders/{id}/cancel``) at a random delay of
``cancel_after_s`` after each is first written, whatever it is doing then (waiting to be claimed, in a step,
its agent's call in flight, between the supervisor's retries, waiting an outage out, in ``Error``), as a
client's ``CancelOrder`` would at other moments: the app takes it before the pivot and refuses it (409)
after. Those draws, and a cancel's retry delays, come from a generator of their own
(``seed:operator-cancel``), made only when ``cancel_rate`` > 0: with none, every other draw is as before. A
cancel is planned at most once an order and is not counted in ``max_actions_per_order``.

It judges nothing: an action the app refuses (409: the order moved on, the review closed) is counted as
refused (a compensate of an ``Error`` order refused, past its pivot, is followed by a resubmit); one that met
an unavailable store (503) or a host restart is tried again a minute or two later, at most ``RETRIES`` times.
What it did goes in the report's ``operator_actions`` (action -> outcome -> count).

With ``discard_orderless``, it also reads the alert queue (a peek from the last alert it read: nothing is received)
for ``PaymentWithoutOrder`` alerts, and at a random delay of ``after_s`` after each, having refunded the payment (an
uncaptured payment: nothing to undo at the simulated provider), discards the notification the alert names
(``POST ops/orders/{id}/deferred/{seq}/discard``; once an alert, not counted in ``max_actions_per_order``). Its delays
come from a generator of its own (``seed:operator-discard``), made only then: an operator that does not discard
draws as before. An order submitted under that id afterwards must not take the payment: the report's
``discarded_payments_applied``.

Every final answer it gets (not a 5xx it tries again) is kept, reduced to what it promised (``OperatorAnswer``: a few
fields, not the body), for the report to check against what happened (``operator_answers_broken``,
``localrun/operator_answers.py``); the run does not end while a message a discard was answered 200 for is still
deferred (the peek sweep dead-letters one answered ``deadLettered: false`` as recorded)."""

from __future__ import annotations

import concurrent.futures
import heapq
import json
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from deferral.sweep import ORDERLESS_ALERT
from domain.review import REVIEW_REQUESTED
from domain.states import ProcessState
from localrun.audit import Transition
from localrun.host import LocalHost
from localrun.operator_answers import OperatorAnswer
from localrun.profile import OperatorPlan
from localrun.servicebus.messages import MessageState
from localrun.worker.http import HttpAnswer, HttpRequestData

OPERATOR_NAME = "operator@localrun"
OPERATOR = f"{OPERATOR_NAME}:Orders.Read,Orders.Operate"
ORIGIN = "http://127.0.0.1"
RETRIES = 3  # tries again after a 5xx (the store unavailable, a host restart dropped the request)
RETRY_AFTER_S = (60.0, 180.0)


def app_settings(plan: OperatorPlan | None) -> dict[str, str]:
    """The app settings a run with an operator adds: the principal its requests are answered for."""
    return {"OPS_LOCAL_PRINCIPAL": OPERATOR} if plan is not None else {}


@dataclass(order=True)
class _Planned:
    at: datetime
    order_id: str
    action: str  # resubmit | compensate | review | cancel | discard
    tries: int = field(default=0, compare=False)
    why: str = field(default="", compare=False)
    sequence_number: int = field(default=0, compare=False)  # a discard's deferred notification
    review_id: str = field(default="", compare=False)  # a review's, once read


@dataclass(frozen=True)
class OperatorMove:
    """An action the app took (200, not a repeat): when it answered, which order, which action."""

    at: datetime
    order_id: str
    action: str


def outcome(answer: HttpAnswer) -> str:
    if answer.status == 200:
        try:
            repeated = bool(json.loads(answer.body or b"{}").get("repeated"))
        except ValueError:
            repeated = False
        return "repeated" if repeated else "done"
    return {409: "refused", 404: "not_found", 503: "unavailable"}.get(answer.status, f"http_{answer.status}")


class Operator:
    def __init__(
        self,
        plan: OperatorPlan,
        rng: random.Random,
        host: LocalHost,
        cancels: random.Random | None = None,
        discards: random.Random | None = None,
    ) -> None:
        """``rng``: the generator of its reactions to failures and reviews; ``cancels``: that of its cancels
        (needed when ``plan.cancel_rate`` > 0, drawn from only then); ``discards``: that of its discards (needed
        with ``plan.discard_orderless``)."""
        if plan.cancel_rate > 0 and cancels is None:
            raise ValueError("an operator that cancels needs a generator for its cancels")
        if plan.discard_orderless and discards is None:
            raise ValueError("an operator that discards needs a generator for its discards")
        self.plan = plan
        self._rng = rng
        self._cancels = cancels
        self._discards = discards
        self._alerts_from = 0  # the alert queue's next sequence number to read (discard_orderless)
        self._host = host
        self._cancel_drawn: set[str] = set()  # orders whose cancel was drawn (at their first write)
        self._planned: list[_Planned] = []
        self._in_flight: list[tuple[_Planned, str, concurrent.futures.Future[HttpAnswer]]] = []
        self._acts: Counter[str] = Counter()  # actions planned per order
        self.counts: dict[str, Counter[str]] = {}
        self.moves: list[OperatorMove] = []
        # every final answer (not a 5xx tried again), reduced to what it promised: the report checks them
        # (``operator_answers_broken``)
        self.answers: list[OperatorAnswer] = []
        self._discarded: set[int] = set()  # sequence numbers a discard was answered 200 for

    # --- what it sees ---------------------------------------------------------------------------------

    def observe(self, transitions: Iterable[Transition]) -> None:
        """Plans an action for each order that just reached ``Error`` or ``CompensationFailed``, or asked
        for a review (the audited writes, in order)."""
        plan = self.plan
        for t in transitions:
            if t.before is None and plan.cancel_rate > 0:
                self._maybe_cancel(t)
            action: str | None = None
            if t.after is ProcessState.ERROR and t.before is not ProcessState.ERROR:
                draw = self._rng.random()
                if draw < plan.resubmit_rate:
                    action = "resubmit"
                elif draw < plan.resubmit_rate + plan.compensate_rate:
                    action = "compensate"
            elif t.after is ProcessState.COMPENSATION_FAILED and t.before is not ProcessState.COMPENSATION_FAILED:
                if self._rng.random() < plan.compensate_rate:
                    action = "compensate"
            elif t.event == REVIEW_REQUESTED and plan.answer_reviews is not None:
                action = "review"
            if action is None or self._acts[t.order_id] >= plan.max_actions_per_order:
                continue
            self._acts[t.order_id] += 1
            delay = timedelta(seconds=self._rng.uniform(*plan.after_s))
            heapq.heappush(self._planned, _Planned(t.at + delay, t.order_id, action, why=t.after.value))

    def _maybe_cancel(self, created: Transition) -> None:
        """At an order's first audited write (its record created): a cancel, with ``cancel_rate``, due
        ``cancel_after_s`` later (once an order: a record created again is not a new order)."""
        assert self._cancels is not None
        if created.order_id in self._cancel_drawn:
            return
        self._cancel_drawn.add(created.order_id)
        if self._cancels.random() < self.plan.cancel_rate:
            delay = timedelta(seconds=self._cancels.uniform(*self.plan.cancel_after_s))
            planned = _Planned(created.at + delay, created.order_id, "cancel", why="its first write")
            heapq.heappush(self._planned, planned)

    # --- what it does ---------------------------------------------------------------------------------

    def read_alerts(self, now: datetime) -> None:
        """With ``discard_orderless``: a discard planned for each ``PaymentWithoutOrder`` alert sent since the last
        read (peeked from where that read stopped), ``after_s`` from now."""
        if not self.plan.discard_orderless or self._discards is None:
            return
        for alert, seq in self._new_alerts():
            details = alert.get("details") or {}
            number, order_id = details.get("sequenceNumber"), alert.get("orderId")
            if alert.get("kind") == ORDERLESS_ALERT and isinstance(number, int) and isinstance(order_id, str):
                delay = timedelta(seconds=self._discards.uniform(*self.plan.after_s))
                why = str(alert.get("alertId", ORDERLESS_ALERT))
                planned = _Planned(now + delay, order_id, "discard", why=why, sequence_number=number)
                heapq.heappush(self._planned, planned)
            self._alerts_from = seq + 1

    def _new_alerts(self) -> list[tuple[dict[str, Any], int]]:
        found: list[tuple[dict[str, Any], int]] = []
        # the runner's own reading (``contents``: not counted as the app's peeks), from where the last one stopped
        for message in self._host.broker.contents(OPERATOR_ALERTS_QUEUE):
            if int(message.sequence_number) < self._alerts_from:
                continue
            try:
                alert = json.loads(message.body)
            except ValueError:
                alert = None
            found.append((alert if isinstance(alert, dict) else {}, int(message.sequence_number)))
        return found

    def next_due(self) -> datetime | None:
        return self._planned[0].at if self._planned else None

    def busy(self) -> bool:
        if self.plan.discard_orderless and self._new_alerts():
            return True  # an alert it has not read yet may name a payment to discard
        return bool(self._planned or self._in_flight) or self.discards_unsettled()

    def act(self, now: datetime) -> None:
        """Takes the answers that came, then sends what is due (called before each pump)."""
        waiting, self._in_flight = self._in_flight, []
        for planned, stage, future in waiting:
            if future.done():
                self._answered(planned, stage, future.result(), now)  # a review's read sends its answer
            else:
                self._in_flight.append((planned, stage, future))
        while self._planned and self._planned[0].at <= now:
            planned = heapq.heappop(self._planned)
            if planned.action == "review":
                self._send(planned, "read", "GET", f"/api/ops/orders/{planned.order_id}", None)
            else:
                reason = (
                    f"localrun operator: refunded at the provider after {planned.why}"
                    if planned.action == "discard"
                    else f"localrun operator: {planned.action} after {planned.why}"
                )
                self._send(planned, planned.action, "POST", self._path(planned), {"reason": reason})

    def _path(self, planned: _Planned) -> str:
        if planned.action == "discard":
            return f"/api/ops/orders/{planned.order_id}/deferred/{planned.sequence_number}/discard"
        return f"/api/ops/orders/{planned.order_id}/{planned.action}"

    def _send(self, planned: _Planned, stage: str, method: str, path: str, body: dict[str, Any] | None) -> None:
        headers = {"Host": "127.0.0.1"}
        data = b""
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        request = HttpRequestData(method, ORIGIN + path, headers, data)
        self._in_flight.append((planned, stage, self._host.submit_http(request)))

    def _answered(self, planned: _Planned, stage: str, answer: HttpAnswer, now: datetime) -> None:
        if stage == "read":
            if answer.status >= 500:
                self._again(planned, now, "review", answer)
                return
            review = _waiting_review(answer)
            if review is None:  # closed, timed out or answered already: nothing to answer
                self._count("review", "nothing_to_answer")
                return
            body = {"reason": "localrun operator: review answered", "action": self.plan.answer_reviews}
            planned = replace(planned, review_id=review)
            self._send(planned, "review", "POST", self._path(planned), {**body, "reviewId": review})
            return
        result = outcome(answer)
        if answer.status >= 500:
            self._again(planned, now, stage, answer)
            return
        self._count(stage, result)
        self._keep(planned, stage, answer, result, now)
        if result == "done":
            self.moves.append(OperatorMove(now, planned.order_id, stage))
        elif (
            result == "refused"
            and stage == "compensate"
            and planned.why == ProcessState.ERROR.value
            and self._acts[planned.order_id] < self.plan.max_actions_per_order
        ):
            # past the pivot nothing may be undone: the operator resubmits the order instead
            self._acts[planned.order_id] += 1
            delay = timedelta(seconds=self._rng.uniform(*RETRY_AFTER_S))
            heapq.heappush(self._planned, _Planned(now + delay, planned.order_id, "resubmit", why=planned.why))

    def _keep(self, planned: _Planned, stage: str, answer: HttpAnswer, result: str, now: datetime) -> None:
        """The answer, reduced to what it promised (``OperatorAnswer``): a few fields, not its body."""
        try:
            body = json.loads(answer.body or b"{}")
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        entry = body.get("entry")
        entry = entry if isinstance(entry, dict) else {}
        # deferral.discard's refusals for an order that exists: "order <id> exists now: the payment is applied"
        exists = stage == "discard" and answer.status == 409
        exists = exists and f"order {planned.order_id} exists now" in str(body.get("error", ""))
        kept = OperatorAnswer(
            at=now,
            order_id=planned.order_id,
            action=stage,
            status=answer.status,
            by=OPERATOR_NAME,
            repeated=result == "repeated",
            sequence_number=planned.sequence_number,
            notification_id=str(entry.get("notificationId") or "") if answer.status == 200 else "",
            order_exists=exists,
            review_id=planned.review_id,
            decision=(self.plan.answer_reviews or "") if stage == "review" else "",
        )
        self.answers.append(kept)
        if stage == "discard" and answer.status == 200:
            self._discarded.add(planned.sequence_number)

    def discards_unsettled(self) -> bool:
        """Whether a message a discard was answered 200 for is still deferred on ``orders`` (answered
        ``deadLettered: false``: the peek sweep dead-letters it as recorded): the run waits for it, so that the
        report can check the promise (``operator_answers_broken``)."""
        if not self._discarded:
            return False
        on_queue = {
            int(m.sequence_number): m.state
            for m in self._host.broker.contents(ORDERS_QUEUE)
            if int(m.sequence_number) in self._discarded
        }
        self._discarded &= set(on_queue)  # one gone from the queue never comes back to it
        return MessageState.DEFERRED in on_queue.values()

    def _again(self, planned: _Planned, now: datetime, action: str, answer: HttpAnswer) -> None:
        self._count(action, outcome(answer))
        if planned.tries < RETRIES:
            rng = self._cancels if planned.action == "cancel" and self._cancels is not None else self._rng
            if planned.action == "discard" and self._discards is not None:
                rng = self._discards
            delay = timedelta(seconds=rng.uniform(*RETRY_AFTER_S))
            again = replace(planned, at=now + delay, tries=planned.tries + 1)
            heapq.heappush(self._planned, again)

    def _count(self, action: str, result: str) -> None:
        self.counts.setdefault(action, Counter())[result] += 1

    def report(self) -> dict[str, dict[str, int]]:
        return {action: dict(sorted(c.items())) for action, c in sorted(self.counts.items())}


def _waiting_review(answer: HttpAnswer) -> str | None:
    """The id of the review the order waits for (not yet answered), from ``GET ops/orders/{id}``."""
    if answer.status != 200:
        return None
    try:
        review = json.loads(answer.body).get("review")
    except (ValueError, AttributeError):
        return None
    if not isinstance(review, dict) or review.get("noted") is not None:
        return None
    review_id = review.get("reviewId")
    return review_id if isinstance(review_id, str) else None
