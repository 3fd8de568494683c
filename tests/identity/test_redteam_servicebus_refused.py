"""Red team: Service Bus refusing the app's identity on the sending side, through the production wiring's
``ServiceBusClient`` (the real ``DefaultAzureCredential`` asking the managed identity endpoint), the SDK's own CBS
authentication (``tests/identity/servicebus_cbs.py``: only the connection and links below it stand in for the
namespace), its retries and error mapping, and the app's sender (``adapters/servicebus/sender.py``).

What the SDK raises: a token the namespace does not take (put-token answered 401: another audience, expired) is a
``ServiceBusAuthenticationError`` after its retries; a principal without a data role is taken at put-token and
refused at the link's attach (``amqp:unauthorized-access``: ``ServiceBusAuthorizationError``); no token from the
credential (the identity endpoint failing) is a plain ``ServiceBusError`` "Handler failed", not retried."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.servicebus.sender import OutgoingMessage, QueueNotFound, SendError
from contracts.names import OPERATOR_ALERTS_QUEUE
from localrun.cosmos_server import CosmosServer
from tests.identity.conftest import APP_IDENTITY
from tests.identity.endpoint import IdentityEndpoint
from tests.identity.servicebus_cbs import Namespace, namespace_below_the_sdk
from tests.identity.test_production_wiring import azure_settings

pytestmark = pytest.mark.cosmos

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _sender(production_wiring: Any, entra_cosmos: CosmosServer) -> Any:
    return production_wiring(azure_settings(entra_cosmos)).sender


def test_the_harness_sends_with_the_identity_and_refuses_a_queue_that_denies_it(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: a token of the app's identity is put on the CBS link and taken; a submitter's queue that gives the app no
    role refuses it (``QueueNotFound``), its own queues take it."""
    with namespace_below_the_sdk(monkeypatch, Namespace([APP_IDENTITY], denied={"client-statuses"})) as namespace:
        sender = _sender(production_wiring, entra_cosmos)
        sender.send("payment-requests", OutgoingMessage(body="{}", message_id="r-1"))
        with pytest.raises(QueueNotFound, match="unauthorized-access"):
            sender.send("client-statuses", OutgoingMessage(body="{}", message_id="o-1:Received:1"))
    assert namespace.sent == {"payment-requests": ["r-1"]}
    assert namespace.put_tokens[0] == (200, "OK") and identity.for_resource("https://servicebus.azure.net/")


def test_a_token_service_bus_does_not_take_is_a_transient_send_error_that_says_so(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team: the namespace answering the CBS put-token 401 (a token for another audience, or one it finds expired)
    reached the app as "Service Bus has encountered an error. Error condition: amqp:client-error.": a ``SendError``,
    rightly transient (every queue refuses it alike, and a token renewed may be taken), but with nothing to tell an
    operator reading ``StatusNotSent`` or ``AlertSendFailed`` that the identity's token is the problem. Now it says
    so, with the namespace's status and reason."""
    namespace = Namespace([APP_IDENTITY], audience="https://another-namespace.servicebus.windows.net/")
    with namespace_below_the_sdk(monkeypatch, namespace):
        sender = _sender(production_wiring, entra_cosmos)
        with pytest.raises(SendError) as raised:
            sender.send(OPERATOR_ALERTS_QUEUE, OutgoingMessage(body="{}", message_id="alert:x"))
    assert not isinstance(raised.value, QueueNotFound)
    assert "token" in str(raised.value) and "401" in str(raised.value) and "InvalidAudience" in str(raised.value)
    assert namespace.sent == {}


def test_no_token_from_the_identity_endpoint_is_a_transient_send_error_that_says_so(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: the endpoint failing (a 503 on every try) is a ``SendError``, never a refusal of the queue (the sender's
    branch for azure-core's ``ClientAuthenticationError`` made it ``QueueNotFound``; the SDK wraps that error, so only
    its wrapper reaches the app), and its text says the credential gave no token."""
    identity.failing = 503
    with namespace_below_the_sdk(monkeypatch, Namespace([APP_IDENTITY])) as namespace:
        sender = _sender(production_wiring, entra_cosmos)
        with pytest.raises(SendError) as raised:
            sender.send("client-statuses", OutgoingMessage(body="{}", message_id="o-1:Received:1"))
    assert not isinstance(raised.value, QueueNotFound)
    assert "no token" in str(raised.value)
    assert namespace.sent == {} and namespace.put_tokens == []


def test_the_app_without_its_own_role_is_not_a_reply_queue_refusing_it(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team: with the app's role on the namespace not there (propagating after a deployment, or removed), a status
    send to a submitter's queue is refused ``amqp:unauthorized-access``, which ``publish_status`` took for that queue
    refusing the app (``Delivery.REFUSED``, ``ReplyQueueUnavailable``): its alert blamed the submitter's queue, and
    past ``REFUSED_RETRY_WINDOW`` (45 minutes) every order's ``Received`` and final status were dropped for good,
    though the submitters' queues were fine and the role came back. The refusal alert goes to the app's own
    ``operator-alerts``, which refuses it too: then it is the app's identity, not the reply queue, and the send is a
    ``SendError`` (owed, tried again on the usual timers), saying so."""
    from notifications.status import Delivery, publish_status

    with namespace_below_the_sdk(monkeypatch, Namespace([])) as namespace:
        sender = _sender(production_wiring, entra_cosmos)
        with pytest.raises(SendError) as raised:
            publish_status(sender, reply_to="client-statuses", order_id="o-1", status="Received", attempt=0, at=T0)
        assert not isinstance(raised.value, QueueNotFound)
        assert OPERATOR_ALERTS_QUEUE in str(raised.value)

    # a reply queue refusing the app alone is still a refusal of that queue, alerted
    with namespace_below_the_sdk(monkeypatch, Namespace([APP_IDENTITY], denied={"client-statuses"})) as namespace:
        sender = _sender(production_wiring, entra_cosmos)
        delivery = publish_status(
            sender, reply_to="client-statuses", order_id="o-1", status="Received", attempt=0, at=T0
        )
    assert delivery is Delivery.REFUSED
    assert namespace.sent == {OPERATOR_ALERTS_QUEUE: ["alert:ReplyQueueUnavailable:-:client-statuses"]}


def test_a_retry_whose_deferred_message_cannot_be_fetched_for_want_of_a_token_is_handled_again_later(
    production_wiring: Any, identity: IdentityEndpoint, entra_cosmos: CosmosServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team, the receiving side: a ``RetryDeferred`` fetches its deferred message by sequence number on a receiver
    of its own, whose link needs a token of its own (a sender kept open still has one). With the identity endpoint
    failing, the SDK's "Handler failed" escaped ``handle_orders_message`` (neither a store nor a send error): the
    invocation failed, Service Bus redelivered the retry at once and, its 5 deliveries spent in seconds,
    dead-lettered it ``MaxDeliveryCountExceeded`` (a page with no reason; the notification left to the peek sweep).
    The receiver's failures are a ``ReceiveError`` now, saying why, and the retry is handled again later."""
    import json

    from adapters.clock import ManualClock
    from contracts.messages import PaymentNotification
    from contracts.names import ORDERS_QUEUE
    from deferral.tracking import record_deferred
    from domain.deferral import DeferralReason
    from submission.intake import handle_orders_message
    from tests.contexts import context_with
    from tests.fakes import FakeReceivedMessage, RecordingSender

    entra_cosmos.set_auth([APP_IDENTITY], ["https://127.0.0.1"])
    try:
        with namespace_below_the_sdk(monkeypatch, Namespace([APP_IDENTITY])):
            sender = RecordingSender()  # the sends are not under test here: a kept sender's link has its token
            ctx = context_with(production_wiring(azure_settings(entra_cosmos)), sender=sender, clock=ManualClock(T0))
            body = {
                "type": "PaymentNotification",
                "schemaVersion": 1,
                "notificationId": "pay-9",
                "orderId": "o-9",
                "amountCents": 2500,
                "currency": "EUR",
                "providerReference": "ref-9",
            }
            deferred = FakeReceivedMessage.of(json.dumps(body), "pay-9")
            doc = record_deferred(
                ctx,
                "o-9",
                deferred,
                "PaymentNotification",
                DeferralReason.ORDER_NOT_SUBMITTED,
                note=PaymentNotification.model_validate(body),
            )
            entry = doc.entry(deferred.sequence_number)
            assert entry is not None
            retry = {
                "type": "RetryDeferred",
                "schemaVersion": 1,
                "sequenceNumber": deferred.sequence_number,
                "orderId": "o-9",
                "messageId": "pay-9",
                "round": 1,
                "retryToken": entry.retry_token,
            }
            identity.failing = 503  # the Cosmos DB token is cached; the receiver's link asks for one of its own
            result = handle_orders_message(ctx, FakeReceivedMessage.of(json.dumps(retry), "retry-deferred:x"))
    finally:
        entra_cosmos.set_auth(None)

    assert result.settlement.kind == "complete"  # not failed: redelivered at once, then dead-lettered
    [copy] = [m for q, m in sender.sent if q == ORDERS_QUEUE]
    assert copy.subject == "RetryDeferred" and copy.scheduled_enqueue_time is not None
