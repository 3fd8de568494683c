"""``orders`` messages of what the app stored before identifiers were one line (session 63): a store-retry copy the
release before made, and a client's resend. Such a message breaks the one-line rule only, and carries what the app
stored of it (the order document; the payment on the record, or the deferral entry of the notification): it is handled
as it was before the upgrade, logged ``IdentifierStoredBefore``. Before: dead-lettered ``InvalidFields``, a copy's
order document left without its state record for good (a clean resubmission is ``ConflictingOrderData``), a copy's
payment lost while its prepaid order waited for it, a resend paged instead of completed as the repeat it is. Anything
else with a line break in an identifier is still refused. The previous release is played by ``previous_release``
(tests/deferral/conftest.py: the contracts as they were, its writes made by its own handlers); the rest runs this
release's code through the registered ``submit_order`` trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import EXAMPLE_STATUS_QUEUE, ORDERS_QUEUE
from contracts.store_retry import ROUND_PROPERTY, retry_round
from domain.deferral import EntryStatus
from domain.text import has_line_break
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import while_using
from tests.deferral.support import deliver, deliver_all, notification, order, send
from tests.deferral.test_store_retry_copies import recorded_then_copied
from tests.fakes import OrderStoreThatFailsOnRead, StateStoreThatFails

pytestmark = pytest.mark.cosmos

CUSTOMER = "cust-1\nFAKE: order p1 refunded"
NOTIFICATION = "n-1\r\nn-2"
REFERENCE = "psp\t1"


def _statuses(broker: Any) -> list[str]:
    return [json.loads(m.body)["status"] for m in broker.peek(EXAMPLE_STATUS_QUEUE, 100)]


def _stored_before(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "IdentifierStoredBefore"]


def _no_forged_line(caplog: pytest.LogCaptureFixture) -> None:
    app_lines = [r.getMessage() for r in caplog.records if not r.name.startswith("azure.")]  # the SDK's are its own
    assert not [m for m in app_lines if has_line_break(m)], "a log line was forged"


def _dead_lettered_invalid(broker: Any, message_id: str, field: str) -> None:
    dead = [d for d in broker.dead_letters(ORDERS_QUEUE) if d.message_id == message_id]
    assert [d.reason for d in dead] == ["InvalidFields"], dead
    assert f"field '{field}'" in (dead[0].description or "") and "one line" in (dead[0].description or ""), dead


def test_an_orders_store_retry_copy_made_before_the_upgrade_completes_its_state_record(
    functions: Any, ctx: Any, broker: Any, clock: Any, previous_release: pytest.MonkeyPatch, caplog: Any
) -> None:
    # the release before: the order document written, the state record's create failed: a copy scheduled
    send(broker, order(customerId=CUSTOMER), "order-p1")
    [original] = broker.peek(ORDERS_QUEUE, 10)
    with while_using(ctx, states=StateStoreThatFails(ctx.states, "create")):
        assert deliver(functions, broker)
    stored = ctx.orders.get("p1")
    assert stored is not None and stored["customerId"] == CUSTOMER and ctx.states.get("p1") is None
    [copy] = broker.peek(ORDERS_QUEUE, 10)
    assert retry_round(copy.application_properties) == 1
    previous_release.undo()  # the upgrade

    clock.advance(STORE_RETRY_DELAYS[0])
    with caplog.at_level(logging.INFO):
        deliver_all(functions, broker)

    assert broker.dead_letters(ORDERS_QUEUE) == []
    record = ctx.states.get("p1")
    assert record is not None and record.submitted_as == original.sequence_number  # created by the order's message
    assert _statuses(broker) == ["Received"]
    [event] = _stored_before(caplog)
    assert (event.orderId, event.copy, event.fields) == ("p1", True, ["customerId"]), vars(event)  # type: ignore[attr-defined]
    _no_forged_line(caplog)


def test_a_payment_notifications_store_retry_copy_made_before_the_upgrade_is_applied_when_its_order_comes(
    functions: Any, ctx: Any, broker: Any, clock: Any, previous_release: pytest.MonkeyPatch, caplog: Any
) -> None:
    """The release before recorded the notification as waiting for its order (its deferral entry holds its ids and
    digest), then copied it on a state store failure. Before: the copy was dead-lettered ``InvalidFields``, the
    original's entry pointed at a message that was gone, and the prepaid order never got its payment."""
    body = notification(notification_id=NOTIFICATION, providerReference=REFERENCE)
    seq = recorded_then_copied(functions, ctx, broker, clock, body)
    previous_release.undo()

    clock.advance(STORE_RETRY_DELAYS[0])
    with caplog.at_level(logging.INFO):
        deliver_all(functions, broker)  # the copy: deferred for its order beside the original's entry
        send(broker, order(), "order-p1")
        deliver_all(functions, broker)

    assert broker.dead_letters(ORDERS_QUEUE) == []
    record = ctx.states.get("p1")
    assert record is not None and record.payment is not None
    assert (record.payment.notification_id, record.payment.provider_reference) == (NOTIFICATION, REFERENCE)
    assert ctx.deferrals.get("p1").entry(seq).status is EntryStatus.APPLIED
    [event] = _stored_before(caplog)
    assert (event.copy, event.fields) == (True, ["notificationId", "providerReference"]), vars(event)  # type: ignore[attr-defined]
    _no_forged_line(caplog)


def test_a_clients_resend_of_an_order_stored_before_the_upgrade_is_a_repeat(
    functions: Any, ctx: Any, broker: Any, previous_release: pytest.MonkeyPatch, caplog: Any
) -> None:
    send(broker, order(customerId=CUSTOMER), "order-p1")
    deliver_all(functions, broker)
    created = ctx.states.get("p1")
    previous_release.undo()

    send(broker, order(customerId=CUSTOMER), "order-p1-again")
    with caplog.at_level(logging.INFO):
        deliver_all(functions, broker)

    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert ctx.states.get("p1") == created  # nothing written
    assert _statuses(broker) == ["Received"]  # said again, as before (not begun), under the same MessageId:
    assert broker.counters(EXAMPLE_STATUS_QUEUE).duplicates_dropped == 1  # collapsed by duplicate detection
    [event] = _stored_before(caplog)
    assert (event.messageId, event.copy) == ("order-p1-again", False), vars(event)  # type: ignore[attr-defined]
    _no_forged_line(caplog)


def test_a_clients_resend_of_a_payment_applied_before_the_upgrade_is_a_repeat(
    functions: Any, ctx: Any, broker: Any, previous_release: pytest.MonkeyPatch, caplog: Any
) -> None:
    send(broker, order(), "order-p1")
    send(broker, notification(notification_id=NOTIFICATION, providerReference=REFERENCE), "n-1")
    deliver_all(functions, broker)
    applied = ctx.states.get("p1")
    assert applied is not None and applied.payment is not None
    previous_release.undo()

    send(broker, notification(notification_id=NOTIFICATION, providerReference=REFERENCE), "n-1-again")
    with caplog.at_level(logging.INFO):
        deliver_all(functions, broker)

    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert ctx.states.get("p1") == applied
    [event] = _stored_before(caplog)
    assert event.messageId == "n-1-again", vars(event)  # type: ignore[attr-defined]
    _no_forged_line(caplog)


def test_a_resend_whose_stored_order_cannot_be_read_is_handled_again_later(
    functions: Any, ctx: Any, broker: Any, clock: Any, previous_release: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Whether the app stored what it carries is read from the stores: when they fail, the message is handled again
    later, as in any store outage (not dead-lettered for a proof it could not make)."""
    send(broker, order(customerId=CUSTOMER), "order-p1")
    deliver_all(functions, broker)
    previous_release.undo()

    orders = OrderStoreThatFailsOnRead(ctx.orders)
    orders.failing = True
    send(broker, order(customerId=CUSTOMER), "order-p1-again")
    with while_using(ctx, orders=orders), caplog.at_level(logging.INFO):
        assert deliver(functions, broker)
    assert [r.round for r in caplog.records if getattr(r, "event", None) == "IntakeRetryScheduled"] == [1]
    clock.advance(STORE_RETRY_DELAYS[0])
    with caplog.at_level(logging.INFO):
        deliver_all(functions, broker)
    assert broker.dead_letters(ORDERS_QUEUE) == []
    assert [r.copy for r in _stored_before(caplog)] == [True]  # type: ignore[attr-defined]


def _copy_marked(broker: Any, body: dict[str, Any], message_id: str) -> None:
    """A message a client marks as a store-retry copy itself (it can set any application property)."""
    out = OutgoingMessage(body=json.dumps(body), message_id=message_id, application_properties={ROUND_PROPERTY: 1})
    broker.send(ORDERS_QUEUE, out)


def test_an_order_with_a_line_break_and_no_stored_document_is_still_refused_copy_or_not(
    functions: Any, ctx: Any, broker: Any
) -> None:
    _copy_marked(broker, order(customerId=CUSTOMER), "forged-copy")
    send(broker, order("p2", customerId=CUSTOMER), "new-order")
    deliver_all(functions, broker)

    _dead_lettered_invalid(broker, "forged-copy", "customerId")
    _dead_lettered_invalid(broker, "new-order", "customerId")
    for order_id in ("p1", "p2"):
        assert ctx.orders.get(order_id) is None and ctx.states.get(order_id) is None


@pytest.mark.parametrize(
    "changed",
    [
        {"customerId": "cust-1\nFAKE: order p1 paid"},  # another text with a line break under the same order id
        {"shipTo": "2 Other St"},  # the same customerId, another order
        {"unexpected": 1},  # a rule other than the one-line rule broken as well
    ],
    ids=["other customerId", "other data", "another rule"],
)
def test_an_order_with_a_line_break_whose_stored_document_differs_is_still_refused(
    functions: Any, ctx: Any, broker: Any, previous_release: pytest.MonkeyPatch, changed: dict[str, Any]
) -> None:
    send(broker, order(customerId=CUSTOMER), "order-p1")
    deliver_all(functions, broker)
    stored, record = ctx.orders.get("p1"), ctx.states.get("p1")
    previous_release.undo()

    _copy_marked(broker, order(customerId=CUSTOMER) | changed, "not-it")
    deliver_all(functions, broker)

    _dead_lettered_invalid(broker, "not-it", "customerId")
    assert (ctx.orders.get("p1"), ctx.states.get("p1")) == (stored, record)


@pytest.mark.parametrize(
    "changed",
    [{"providerReference": "psp\t2"}, {"amountCents": 2400}, {"notificationId": "n-1\nn-3"}],
    ids=["other reference", "other amount", "other id"],
)
def test_a_notification_with_a_line_break_that_is_not_the_stored_one_is_still_refused(
    functions: Any, ctx: Any, broker: Any, previous_release: pytest.MonkeyPatch, changed: dict[str, Any]
) -> None:
    """Applied on the record (order p1) or waiting in a deferral entry (order p2), the stored notification is the
    one a message must carry, every field the same."""
    send(broker, order(), "order-p1")
    send(broker, notification(notification_id=NOTIFICATION, providerReference=REFERENCE), "n-1")
    send(broker, notification("p2", notification_id=NOTIFICATION, providerReference=REFERENCE), "n-2")
    deliver_all(functions, broker)
    applied, waiting = ctx.states.get("p1"), ctx.deferrals.get("p2")
    previous_release.undo()

    body = notification(notification_id=NOTIFICATION, providerReference=REFERENCE) | changed
    _copy_marked(broker, body, "not-it-1")
    _copy_marked(broker, body | {"orderId": "p2"}, "not-it-2")
    send(broker, notification("p3", notification_id=NOTIFICATION, providerReference=REFERENCE), "none-stored")
    deliver_all(functions, broker)

    _dead_lettered_invalid(broker, "not-it-1", "notificationId")
    _dead_lettered_invalid(broker, "not-it-2", "notificationId")
    _dead_lettered_invalid(broker, "none-stored", "notificationId")
    assert ctx.states.get("p1") == applied
    assert [e.sequence_number for e in ctx.deferrals.get("p2").entries] == [e.sequence_number for e in waiting.entries]
    assert ctx.deferrals.get("p3") is None
