"""Two submissions of one order handled at once, one refused by the pending cap and the other accepted (the cap
full for one, with room for the other, as the pending count moves). The refusal's mark (``rejectedAt``) is written
on the deferral document the refused one read; the acceptance withdraws the refusal it read, creates the state
record and flags the notifications listed on the document it read. Interleaved:

* the mark written after the acceptance withdrew the earlier refusal (its write re-reads the document and marks it
  again): a refusal then stood for an order whose state record exists, its submitter was told ``Rejected`` after
  ``Received`` (with a ``Rejected`` of its own now that each refused message is told under its own ids:
  it no longer collapsed into the first refusal's), and the mark was never withdrawn;
* the mark written between the acceptance's withdrawal and its state record: a notification dead-lettered under
  it was listed after the acceptance had read the document, so no alert ever named it.

The refusal now looks for the state record once its mark is written: found, the mark is withdrawn and the message
completed untold (the accepted submission speaks for the order). The acceptance, for an order refused before, reads
the document again once its state record exists: a refusal that stands is withdrawn and the notifications listed
are flagged from the document as written.

Through the registered trigger, the in-process broker and Cosmos, as tests/deferral/test_refusal_written_first.py."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cosmos.order_store import CreateOutcome
from contracts.names import ORDERS_QUEUE
from domain.deferral import DeferralDocument
from tests.contexts import context_with
from tests.deferral.support import DurableClientStub, deliver, notification, order
from tests.deferral.test_refusal_written_first import Cap, alert_kinds, submit, told
from tests.deferral.test_refused_notifications_flagged import flagged

pytestmark = pytest.mark.cosmos


class AcceptedBeforeTheMark:
    """The deferral log, where the write of a refusal's mark naming a message other than the one the stored
    document names is preceded by the delivery of the next ``orders`` message, with room under the cap: once."""

    def __init__(self, log: Any, functions: Any, broker: Any, cap: Cap) -> None:
        self._log, self._functions, self._broker, self._cap = log, functions, broker, cap
        self.interleaved = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        if not self.interleaved and doc.rejected_at is not None:
            stored = self._log.get(doc.order_id)
            if stored is not None and stored.rejected_sequence_number != doc.rejected_sequence_number:
                self.interleaved = True
                self._cap.full = False
                assert deliver(self._functions, self._broker, DurableClientStub())
                self._cap.full = True
        saved: DeferralDocument = self._log.save(doc)
        return saved


def test_a_refusal_marked_after_another_submission_was_accepted_is_withdrawn_and_not_told(
    functions, ctx, broker, monkeypatch
):
    """Input: M1 (order p1) is refused by the pending cap. M3 (p1 again) is judged with the cap still full; before
    its mark is written, M2 (p1 again) is handled by another instance with room: M1's refusal withdrawn, the state
    record written, ``Received`` told.

    Expected: M3 tells nothing and raises no alert (the order was accepted: the accepted submission speaks for it);
    no refusal stands on the document.
    Before: M3's write marked the order refused again over M2's withdrawal and told ``Rejected`` after M2's
    ``Received`` (under its own MessageId, so Service Bus kept it); the mark stayed on an accepted order."""
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    assert deliver(functions, broker)  # M1 refused
    submit(broker, order(), "p1:m3")
    submit(broker, order(), "p1:m2")
    racing = AcceptedBeforeTheMark(ctx.deferrals, functions, broker, cap)
    with_race = context_with(ctx, deferrals=racing)
    assert deliver(functions, broker)  # M3, and M2 in the middle
    assert racing.interleaved
    context_with(with_race, deferrals=ctx.deferrals)

    assert ctx.states.get("p1") is not None
    assert told(broker) == ["Rejected", "Received"]
    assert alert_kinds(broker) == ["OrderRejected"]
    assert ctx.deferrals.get("p1").rejected_at is None
    while deliver(functions, broker):
        pass
    assert told(broker) == ["Rejected", "Received"]


class RefusedBeforeTheOrder:
    """The order store, whose first write is preceded by the delivery of the next two ``orders`` messages with the
    cap full (another submission of the order, refused, and a notification for the order)."""

    def __init__(self, store: Any, functions: Any, broker: Any, cap: Cap) -> None:
        self._store, self._functions, self._broker, self._cap = store, functions, broker, cap
        self.interleaved = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def create_or_verify(self, document: dict[str, Any]) -> CreateOutcome:
        if not self.interleaved:
            self.interleaved = True
            self._cap.full = True
            assert deliver(self._functions, self._broker, DurableClientStub())
            assert deliver(self._functions, self._broker, DurableClientStub())
        outcome: CreateOutcome = self._store.create_or_verify(document)
        return outcome


def test_a_notification_dead_lettered_under_a_refusal_marked_during_an_acceptance_is_flagged(
    functions, ctx, broker, monkeypatch
):
    """Input: M1 (prepaid order p1) is refused by the pending cap. M2 (p1 again) is accepted with room: after it
    withdrew M1's refusal, before its order and state record are written, M3 (p1 again) is refused (the cap full
    again: its mark written) and notification n-1 arrives, is found for a refused order and dead-lettered
    ``OrderRejected``.

    Expected: M2's acceptance names n-1 to an operator (``NotificationsForAcceptedOrder``) and no refusal stands on
    the document of the accepted order.
    Before: M2 flagged what the document listed when it read it (nothing): n-1 stayed listed, named by no alert,
    and M3's mark stayed on the accepted order."""
    cap = Cap(monkeypatch, full=True)
    submit(broker, order())
    assert deliver(functions, broker)  # M1 refused
    cap.full = False
    accepted_with_a_refusal_and_a_notification_in_the_middle(functions, ctx, broker, cap)
    doc = ctx.deferrals.get("p1")
    assert not doc.to_flag() and doc.rejected_at is None


def accepted_with_a_refusal_and_a_notification_in_the_middle(functions: Any, ctx: Any, broker: Any, cap: Cap) -> None:
    """A submission of p1 accepted (``cap`` has room), with another submission of p1 refused (the cap full) and
    notification n-1 handled between its read of the deferral document and its order's write; then the state
    record exists, n-1 is in the dead-letter queue and one ``NotificationsForAcceptedOrder`` alert names it."""
    submit(broker, order(), "p1:accepted")
    submit(broker, order(), "p1:refused")
    submit(broker, notification(), "n-1")
    racing = RefusedBeforeTheOrder(ctx.orders, functions, broker, cap)
    with_race = context_with(ctx, orders=racing)
    assert deliver(functions, broker)  # the accepted one, with the refused one and n-1 in the middle
    assert racing.interleaved
    context_with(with_race, orders=ctx.orders)

    assert ctx.states.get("p1") is not None
    assert [d.message_id for d in broker.dead_letters(ORDERS_QUEUE)] == ["n-1"]
    [alert] = flagged(broker)
    assert [n["notificationId"] for n in alert["details"]["notifications"]] == ["n-1"]


def test_a_first_refusal_marked_while_another_submission_is_accepted_is_withdrawn_and_its_notifications_flagged(
    functions, ctx, broker, monkeypatch
):
    """Red team (races). Input: M2 (prepaid order p1, never refused: "p1:accepted") is accepted with room under
    the cap; after it read the order's deferral document (none), before its order and state record are written, M1
    (p1 again: "p1:refused") is refused (the cap full: its mark written, no record found yet, ``Rejected`` told)
    and notification n-1 arrives, finds the refusal and is dead-lettered ``OrderRejected``.

    Expected: once M2's record exists no refusal stands on the order's document, an operator is told that n-1 (in
    the dead-letter queue) is for an accepted order (``NotificationsForAcceptedOrder``), and the submitter's last
    word is ``Received``.
    Before: only the acceptance of an order refused before read the document again; M2 had read none, so
    ``rejectedAt`` stayed on the live order and no alert named n-1 (its payment lay in the dead-letter queue while
    the prepaid order waited for it)."""
    cap = Cap(monkeypatch, full=False)
    accepted_with_a_refusal_and_a_notification_in_the_middle(functions, ctx, broker, cap)
    assert told(broker) == ["Rejected", "Received"]
    doc = ctx.deferrals.get("p1")
    assert doc.rejected_at is None and not doc.to_flag()
