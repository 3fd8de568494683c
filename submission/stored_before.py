"""An ``orders`` message of what the app stored before identifiers were one line (session 63).

Since then ``customerId``, ``notificationId`` and ``providerReference`` holding a tab or a line break are refused
(``contracts.messages.Identifier``: ``InvalidFields``, nothing written). Two kinds of message still carry such an id
for something the release before accepted and stored: its store-retry copy (``submission.store_outage``: the order
document written, its state record not; a notification recorded as waiting for its order, then copied), due after
the upgrade, and a client's resend of what it sent before. Refused, a copy's order document stayed without its
record for good (a clean resubmission is ``ConflictingOrderData``), a copy's payment was lost while its prepaid order
waited for it, and a resend was paged instead of completed as a repeat.

Such a message is handled as before when the one-line rule is all it breaks (``one_line_only``: it parses as the
release before read it) and the app stored what it carries (``stored_as_carried``): its order document, the same
(``same_order``); or, refused at the pending cap (no order document written), the refusal of this very message,
which it is only ever settled as (``submission.intake.finish_refused``: red team, such a copy was dead-lettered and
its submitter never heard ``Rejected``); or its notification, every field the same, as the payment on its order's
record or in a deferral entry (same id and digest). A client can mark a message as a copy (``storeRetryRound``),
so the mark proves nothing: what is stored does. Nothing stored after the upgrade holds such an id unless a message
proven so carried it, so what this takes in is what the release before took in. Anything else is dead-lettered
``InvalidFields``, as before.
The ids go on as stored data does: logged on one line (``app_event``), in alert ids on one line
(``domain.ids.alert_id``), shown as stored by the ops API."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from adapters.cosmos.order_store import same_order
from adapters.servicebus.settlement import ReceivedMessage, Settlement, body_bytes, message_id_text, named_order
from contracts.messages import (
    Contract,
    DeferredPaymentNotification,
    OrderSubmitted,
    OrderSubmittedStoredBefore,
    PaymentNotification,
)
from contracts.parsing import InvalidMessage, parse
from contracts.store_retry import is_copy
from dependencies import AppContext
from domain.deferral import DeferralDocument
from domain.payments import differences, notification_digest
from domain.text import has_line_break
from notifications.alerts import OwedAlert
from observability.events import app_event
from submission.result import Handler, IntakeResult
from submission.store_outage import original_sequence

# ``submission.intake.finish_refused``: how an OrderSubmitted a deferral document records as refused is settled
FinishRefused = Callable[
    [AppContext, OrderSubmitted, ReceivedMessage, DeferralDocument, list[OwedAlert]], IntakeResult | None
]
# The contracts as the release before read them: the same but for the identifiers, which may hold a line break.
STORED_BEFORE: dict[str, type[Contract]] = {
    "OrderSubmitted": OrderSubmittedStoredBefore,
    "PaymentNotification": DeferredPaymentNotification,
}
# The identifiers, by field name and their name in the body, of each type.
_IDENTIFIERS: dict[str, tuple[tuple[str, str], ...]] = {
    "OrderSubmitted": (("customer_id", "customerId"),),
    "PaymentNotification": (("notification_id", "notificationId"), ("provider_reference", "providerReference")),
}


def refuse(message: ReceivedMessage, bad: InvalidMessage) -> IntakeResult:
    """Dead-letters ``message``, which does not parse, with ``bad``'s reason, logged ``DeadLettered``."""
    app_event(
        "DeadLettered",
        f"orders message {message_id_text(message)}: {bad}",
        logging.WARNING,
        messageId=message_id_text(message),
        # the order a message that does not parse names (an order, its payment, its cancellation): found by it
        orderId=named_order(message),
        reason=bad.reason,
    )
    return IntakeResult(Settlement.deadletter(bad.reason, bad.description))


def broken_identifiers(contract: Contract) -> list[str]:
    """The identifiers of ``contract`` (by their name in the body) that hold a tab or a line break."""
    kind = str(getattr(contract, "type", ""))
    return [name for field, name in _IDENTIFIERS.get(kind, ()) if has_line_break(str(getattr(contract, field)))]


def one_line_only(message: ReceivedMessage, refused: InvalidMessage) -> Contract | None:
    """``message`` as the release before read it, when the one-line rule for identifiers is all it breaks
    (``refused`` was ``InvalidFields``, and it parses so); else None."""
    if refused.reason != "InvalidFields":
        return None
    try:
        contract = parse(body_bytes(message), STORED_BEFORE)
    except InvalidMessage:
        return None
    return contract if broken_identifiers(contract) else None


@dataclass(frozen=True)
class StoredAs:
    """Where the app stored what a message carries (``where``, for the log). ``refusal``: the deferral document that
    records the refusal of the message itself (the OrderSubmitted sent under its original sequence number): no
    order document was written, and the message is only ever settled as that refusal (``finish_refused``)."""

    where: str
    refusal: DeferralDocument | None = None


def stored_as_carried(ctx: AppContext, contract: Contract, message: ReceivedMessage) -> StoredAs | None:
    """Where the app stored what ``contract`` carries, every field the same, or None: the order document; the
    refusal of this very message (a redelivery or a store-retry copy finishing it, ``original_sequence``: its
    content was never stored, and it is never accepted); the payment on the order's record; a deferral entry of
    the order with the notification's id and digest. Raises ``StoreUnavailable`` as the stores do (the message is
    handled again later)."""
    if isinstance(contract, OrderSubmitted):
        stored = ctx.orders.get(contract.order_id)
        if stored is not None and same_order(stored, contract.order_document()):
            return StoredAs("its order document")
        # refused, it wrote no order document (another submission of the order may have written one since)
        sent_as = original_sequence(message)
        refusals = ctx.deferrals.get(contract.order_id)
        if refusals is None or not refusals.was_refused(sent_as):
            return None
        return StoredAs(f"the refusal of its message #{sent_as}", refusals)
    if not isinstance(contract, PaymentNotification):
        return None
    record = ctx.states.get(contract.order_id)
    if record is not None and record.payment is not None and not differences(record.payment, contract):
        return StoredAs("the payment on its order's record")
    doc = ctx.deferrals.get(contract.order_id)
    digest = notification_digest(contract)
    for entry in doc.entries if doc is not None else ():
        if entry.notification_id == contract.notification_id and entry.notification_digest == digest:
            return StoredAs(f"deferral entry #{entry.sequence_number}")
    return None


def handle_stored_before(
    handler: Handler,
    finish_refused: FinishRefused,
    refused: InvalidMessage,
    ctx: AppContext,
    contract: Contract,
    message: ReceivedMessage,
    owed: list[OwedAlert],
) -> IntakeResult:
    """``handler`` for ``contract`` (``one_line_only``'s) if the app stored what it carries, logged
    ``IdentifierStoredBefore``; else the message is dead-lettered with ``refused``'s reason, as any other. One the
    app refused is settled as that refusal (``finish_refused``), decided on the document that proved it: never
    accepted, whatever was written since."""
    stored = stored_as_carried(ctx, contract, message)
    if stored is None:
        return refuse(message, refused)
    where = stored.where
    kind = str(getattr(contract, "type", ""))
    fields = broken_identifiers(contract)
    copy = is_copy(message.application_properties)
    app_event(
        "IdentifierStoredBefore",
        f"{kind} {message_id_text(message)}: its {', '.join(fields)} holds a tab or a line break, and it carries "
        f"what the app stored before identifiers were one line ({where}): handled as before, "
        f"{'a store-retry copy' if copy else 'a resend'}",
        orderId=named_order(message),
        messageId=message_id_text(message),
        kind=kind,
        fields=fields,
        storedAs=where,
        copy=copy,
    )
    if stored.refusal is not None and isinstance(contract, OrderSubmitted):
        return finish_refused(ctx, contract, message, stored.refusal, owed) or refuse(message, refused)
    return handler(ctx, contract, message, owed)
