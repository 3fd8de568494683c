"""An ``OrderSubmitted`` whose state record exists, but whose deferred payment notifications cannot be applied
through its last store-retry round: completed, its remaining duties handed over, not dead-lettered.

Found by ``localrun fuzz`` (seed 6050, 150 orders): order ``ord-00101``'s submission met Cosmos DB throttling
for 56 rounds, wrote the order and its state record in round 57, and its payment notification (deferred before
the order came) could not be applied in the rounds left; after round 61 the message was abandoned until Service
Bus dead-lettered it ``MaxDeliveryCountExceeded``, and the dead-letter watch paged an operator for a submission
that needed nothing: the order existed and ran, and the peek sweep applied the payment (through its
``RetryDeferred``) minutes later. Now the last round's delivery that finds the record completes the message
(``SubmissionHandedOver``): the waiting notifications are the peek sweep's (it applies a deferred notification
whose order exists), and the notifications dead-lettered under an earlier refusal of the order are named to an
operator by this delivery itself, from the document as it read it (``hand_over_refusals``: nothing else would).

Through the registered trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from deferral.sweep import peek_sweep
from domain.deferral import EntryStatus
from orchestrators.names import DELIVER_ALERT
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import (
    DurableClientStub,
    alerts,
    deferred_sequence_numbers,
    deliver,
    deliver_all,
    notification,
    order,
)
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, submit
from tests.fakes import StateStoreThatFails

pytestmark = pytest.mark.cosmos

LAST = len(STORE_RETRY_DELAYS)
FLAG = "NotificationsForAcceptedOrder"


def submit_in_round(broker: Any, body: dict[str, Any], round_number: int, message_id: str) -> None:
    """The submission as this app's store-retry copy of round ``round_number`` (``submission.store_outage``)."""
    broker.send(
        ORDERS_QUEUE,
        OutgoingMessage(
            body=json.dumps(body), message_id=message_id, application_properties={ROUND_PROPERTY: round_number}
        ),
    )


def dead_letter_reasons(broker: Any) -> list[str | None]:
    return [d.reason for d in broker.dead_letters(ORDERS_QUEUE)]


def applied_by_the_sweep(ctx: Any, broker: Any, clock: Any, seq: int) -> None:
    """The store is back; the peek sweep, once the notification is old enough for it, applies it to the order."""
    clock.advance(ctx.settings.peek_sweep_age + timedelta(minutes=1))
    peek_sweep(ctx)
    assert ctx.states.get("p1").payment.sequence_number == seq
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    assert deferred_sequence_numbers(broker) == []


def test_a_last_round_submission_whose_record_exists_is_completed_and_its_payment_applied_by_the_sweep(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Input: n-1 waits deferred for order p1; p1's submission arrives as its last store-retry copy, the state
    record is created, and applying n-1 meets the state store failing (its replace throttled) on every delivery.

    Expected: no dead letter on ``orders`` (nothing for the dead-letter watch to page): the delivery that finds
    the record completes the message; the payment is applied once the store is back, by the peek sweep.
    Before: abandoned after its last round, five deliveries, ``MaxDeliveryCountExceeded``."""
    submit(broker, notification(), "n-1")
    assert deliver(functions, broker)
    [seq] = deferred_sequence_numbers(broker)

    failing = StateStoreThatFails(ctx.states, "replace")
    with_failing = context_with(ctx, states=failing)
    submit_in_round(broker, order(), LAST, f"p1:store-retry:{LAST}")
    for _ in range(5):  # Service Bus's max delivery count: every delivery it would make
        if not deliver(functions, broker):
            break
    assert with_failing.states.get("p1") is not None  # the record was written by the first delivery
    assert dead_letter_reasons(broker) == []
    assert [m.message_id for m in broker.peek(ORDERS_QUEUE, 100) if m.state.name == "ACTIVE"] == []
    assert ctx.states.get("p1").payment is None  # not applied by the submission

    failing.failing.clear()
    applied_by_the_sweep(context_with(with_failing, states=ctx.states), broker, clock, seq)
    assert dead_letter_reasons(broker) == []


def refused_then_resubmitted(
    functions: Any, ctx: Any, broker: Any, monkeypatch: Any, round_number: int = LAST
) -> tuple[int, int, StateStoreThatFails, Any]:
    """n-0 waits for p1; M1 is refused by the pending cap (n-0 dead-lettered ``OrderRejected``, listed for the
    operator); M2 is accepted, but its record's create fails in round ``round_number - 1`` (the refusal withdrawn
    already: its copy of round ``round_number`` is due a delay later); n-1 then arrives and waits for the order.
    Returns n-0's and n-1's sequence numbers, the state store failing creates and the context using it."""
    cap = Cap(monkeypatch, full=False)
    submit(broker, notification(notification_id="n-0"), "n-0")
    assert deliver(functions, broker)
    [n0] = deferred_sequence_numbers(broker)
    cap.full = True
    submit(broker, order(), "p1")
    assert deliver(functions, broker)
    assert dead_letter_reasons(broker) == ["OrderRejected"]
    cap.full = False

    failing = StateStoreThatFails(ctx.states, "create")
    with_failing = context_with(ctx, states=failing)
    submit_in_round(broker, order(), round_number - 1, f"p1:again:store-retry:{round_number - 1}")
    assert deliver(functions, broker)  # the refusal withdrawn, the create failed: its next copy, a delay later
    submit(broker, notification(notification_id="n-1"), "n-1")
    assert deliver(functions, broker)  # no order, no refusal: it waits for the order
    n1 = max(deferred_sequence_numbers(broker))
    return n0, n1, failing, with_failing


def accepted_in_its_last_round(
    functions: Any,
    ctx: Any,
    broker: Any,
    clock: Any,
    monkeypatch: Any,
    client: DurableClientStub | None = None,
    sender: Any = None,
) -> tuple[int, int, StateStoreThatFails, Any]:
    """``refused_then_resubmitted``; then M2's last copy writes the record, and applying n-1 fails on every delivery
    (``client``: the Durable client of those deliveries, ``sender``: their sender, if not the broker). Returns
    n-0's and n-1's sequence numbers, the failing state store and the context using it."""
    n0, n1, failing, with_failing = refused_then_resubmitted(functions, ctx, broker, monkeypatch)
    failing.failing = {"replace"}
    if sender is not None:
        with_failing = context_with(with_failing, sender=sender)
    clock.advance(STORE_RETRY_DELAYS[-1])
    for _ in range(8):  # the copy's deliveries, and n-1's look again (its order there, its apply failing)
        if not deliver(functions, broker, client):
            break
    assert with_failing.states.get("p1") is not None
    assert dead_letter_reasons(broker) == ["OrderRejected"]  # n-0 only: the submission was not dead-lettered
    return n0, n1, failing, with_failing


def test_the_notifications_dead_lettered_under_a_refusal_are_still_named_when_the_last_round_hands_over(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """Input: ``accepted_in_its_last_round``.

    Expected: the ``NotificationsForAcceptedOrder`` alert naming n-0 is raised (only a submission that finds the
    record raises it), M2 is completed (no dead letter but n-0's), and n-1 is applied by the peek sweep.
    Before: M2 dead-lettered ``MaxDeliveryCountExceeded``, the alert never raised: the last word an operator had
    was that the order was refused, its payment sitting in the dead-letter queue."""
    n0, n1, failing, with_failing = accepted_in_its_last_round(functions, ctx, broker, clock, monkeypatch)
    [named] = [a for a in alerts(broker) if a["kind"] == FLAG]
    assert named["details"]["notifications"] == [{"sequenceNumber": n0, "notificationId": "n-0"}]
    assert ctx.deferrals.get("p1").to_flag()  # still listed: a later submission names them again, never lost

    failing.failing.clear()
    deliver_all(functions, broker)
    applied_by_the_sweep(context_with(with_failing, states=ctx.states), broker, clock, n1)
    assert dead_letter_reasons(broker) == ["OrderRejected"]


def test_a_hand_over_whose_alert_cannot_be_sent_gives_it_to_the_alert_courier(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    """As above, every send to ``operator-alerts`` failing: the alert is handed to the alert courier under its id
    before the message is completed (none of its deliveries spent on it), not lost with the message."""
    client = DurableClientStub()
    refusing = SendsFailing(broker, OPERATOR_ALERTS_QUEUE, times=100)
    n0, _, _, _ = accepted_in_its_last_round(functions, ctx, broker, clock, monkeypatch, client, refusing)
    assert [a for a in alerts(broker) if a["kind"] == FLAG] == []
    [(_, instance, handed)] = [s for s in client.started if s[0] == DELIVER_ALERT]
    assert instance == f"alert:{FLAG}:p1:{n0}"
    assert [n["sequenceNumber"] for n in handed["alert"]["details"]["notifications"]] == [n0]
