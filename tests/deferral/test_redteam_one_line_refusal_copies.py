"""Red team of the store-retry copies of messages stored before identifiers were one line (upgrade-copies): an
``OrderSubmitted`` the release before refused at the pending cap writes no order document, only the refusal of its
message (its sequence number, in the order's deferral document). Its store-retry copy (the ``Rejected`` Durable did
not take, ``submission/courier_retry.py``), or its redelivery, finishes the refusal. Made before the upgrade with a
line break in ``customerId`` and handled after it, the copy was dead-lettered ``InvalidFields`` (no order document
to prove it by): the submitter never heard ``Rejected``, and an operator was paged for a line break. It is the app's
own refusal that proves it (``submission.stored_before``), and it is only ever settled as that refusal: nothing is
written that holds the id. A client's message naming no refused message of the order is still ``InvalidFields``.
The previous release is played by ``previous_release`` (tests/deferral/conftest.py); the rest runs this release's
code through the registered ``submit_order`` trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from contracts.store_retry import ORIGINAL_PROPERTY, ROUND_PROPERTY, retry_round
from domain.text import has_line_break
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, deliver, deliver_all, order, send
from tests.deferral.test_refusal_status_outlasts_a_durable_outage import DurableDown
from tests.deferral.test_refusal_written_first import Cap, SendsFailing, SettlementLost, told

pytestmark = pytest.mark.cosmos

CUSTOMER = "cust-1\nFAKE: order p1 refunded"


def _refused_and_copied(functions: Any, ctx: Any, broker: Any, monkeypatch: Any) -> tuple[Cap, int]:
    """The release before: p1 (a line break in its customerId) refused at the pending cap, its ``Rejected`` not
    sent and not taken by Durable: a store-retry copy scheduled. Returns the cap and the original's number."""
    cap = Cap(monkeypatch, full=True)
    sender = ctx.sender
    context_with(ctx, sender=SendsFailing(broker, "client-statuses", times=1))
    send(broker, order(customerId=CUSTOMER), "order-p1")
    [original] = broker.peek(ORDERS_QUEUE, 10)
    assert deliver(functions, broker, DurableDown())
    [copy] = broker.peek(ORDERS_QUEUE, 10)
    assert retry_round(copy.application_properties) == 1 and told(broker) == []
    assert ctx.orders.get("p1") is None and ctx.deferrals.get("p1").refuses(original.sequence_number)
    context_with(ctx, sender=sender)
    return cap, original.sequence_number


def _no_forged_line(caplog: pytest.LogCaptureFixture) -> None:
    app_lines = [r.getMessage() for r in caplog.records if not r.name.startswith("azure.")]  # the SDK's are its own
    assert not [m for m in app_lines if has_line_break(m)], "a log line was forged"


def _stored_as(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.storedAs for r in caplog.records if getattr(r, "event", None) == "IdentifierStoredBefore"]  # type: ignore[attr-defined]


def test_a_refusals_store_retry_copy_made_before_the_upgrade_finishes_it_and_its_submitter_hears_rejected(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, previous_release: Any, caplog: Any
) -> None:
    _, original = _refused_and_copied(functions, ctx, broker, monkeypatch)
    previous_release.undo()  # the upgrade

    clock.advance(STORE_RETRY_DELAYS[0] + timedelta(seconds=1))
    with caplog.at_level(logging.INFO):
        deliver_all(functions, broker)

    assert broker.dead_letters(ORDERS_QUEUE) == []  # before: InvalidFields, and the submitter never told
    assert told(broker) == ["Rejected"]
    assert _stored_as(caplog) == [f"the refusal of its message #{original}"]
    assert ctx.orders.get("p1") is None and ctx.states.get("p1") is None  # never accepted
    _no_forged_line(caplog)


def test_a_refusals_copy_superseded_by_a_later_accepted_submission_is_completed_not_dead_lettered(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, previous_release: Any, caplog: Any
) -> None:
    cap, _ = _refused_and_copied(functions, ctx, broker, monkeypatch)
    previous_release.undo()
    cap.full = False
    send(broker, order(), "order-p1-again")  # resubmitted on one line before the copy is due: accepted
    deliver_all(functions, broker)
    assert ctx.states.get("p1") is not None

    clock.advance(STORE_RETRY_DELAYS[0] + timedelta(seconds=1))
    with caplog.at_level(logging.INFO):
        deliver_all(functions, broker)

    assert broker.dead_letters(ORDERS_QUEUE) == []  # before: InvalidFields (its order document is another's)
    assert [r.event for r in caplog.records if getattr(r, "event", None) == "RefusalSuperseded"] == [
        "RefusalSuperseded"
    ]
    assert told(broker) == ["Received"]  # the accepted one's; the refused one's Rejected would contradict it
    assert ctx.orders.get("p1")["customerId"] == "cust-1"  # type: ignore[index]
    _no_forged_line(caplog)


def test_a_message_naming_no_refused_message_of_its_order_is_still_refused(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, previous_release: Any
) -> None:
    _, original = _refused_and_copied(functions, ctx, broker, monkeypatch)
    previous_release.undo()

    send(broker, order(customerId=CUSTOMER), "resend")  # a client's resend: a new submission, judged afresh
    forged = {ROUND_PROPERTY: 1, ORIGINAL_PROPERTY: original - 1}  # marked a copy of a message never refused
    body = json.dumps(order(customerId=CUSTOMER))
    broker.send(ORDERS_QUEUE, OutgoingMessage(body=body, message_id="forged", application_properties=forged))
    deliver_all(functions, broker)  # the real copy is not due yet

    dead = {d.message_id: d.reason for d in broker.dead_letters(ORDERS_QUEUE)}
    assert dead == {"resend": "InvalidFields", "forged": "InvalidFields"}, dead
    assert ctx.orders.get("p1") is None and ctx.states.get("p1") is None


def test_a_refused_message_redelivered_after_the_upgrade_finishes_its_refusal(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any, previous_release: Any, caplog: Any
) -> None:
    """The release before refused it and told the submitter, but the settlement never reached Service Bus (the host
    stopped at the upgrade): the same message comes again, under its own sequence number."""
    cap = Cap(monkeypatch, full=True)
    send(broker, order(customerId=CUSTOMER), "order-p1")
    message = broker.receive(ORDERS_QUEUE)
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=message, message_actions=SettlementLost(), client=DurableClientStub()))
    assert told(broker) == ["Rejected"]
    previous_release.undo()

    cap.full = False  # room by the time it comes again: a refused message is still never accepted
    clock.advance(broker.policy(ORDERS_QUEUE).lock_duration + timedelta(seconds=1))
    with caplog.at_level(logging.INFO):
        assert deliver(functions, broker)

    assert broker.dead_letters(ORDERS_QUEUE) == []  # before: InvalidFields
    assert told(broker) == ["Rejected"]  # said again under the same MessageId: collapsed
    assert _stored_as(caplog) == [f"the refusal of its message #{message.sequence_number}"]
    assert ctx.orders.get("p1") is None and ctx.states.get("p1") is None
    _no_forged_line(caplog)
