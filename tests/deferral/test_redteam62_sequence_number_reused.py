"""Red team (hostile62): an entry's sequence number that now names another message. A deferral document keeps
the numbers of its order's deferred messages, and a number names one message only while its queue lives: ``orders``
deleted and created again numbers its messages from 1 again (docs/deploy.md); a hand edit may change one too. What
settles a message as its entry records fetched whatever message held the number: an operator's discard of order
p1's payment dead-lettered order p2's waiting payment (p2's entry still waiting, for a message now in the
dead-letter queue), and finishing p1's ``Applied`` entry completed p2's payment unapplied: lost.

Now the message found at the number must be the entry's (``deferral.apply.is_entrys_message``: its body names the
order and carries the notification the entry recorded): another is left as it is, the discard refused saying why.
Through the registered ``submit_order`` trigger, the in-process broker and the Cosmos protocol server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from adapters.cosmos.deferral_store import update_deferrals
from contracts.names import ORDERS_QUEUE
from deferral.apply import finish_as_recorded
from deferral.discard import discard_deferred
from domain.deferral import DeferralDocument, EntryStatus
from tests.deferral.support import deferred_sequence_numbers, deliver_all, notification, send

pytestmark = pytest.mark.cosmos


def _p1_names_p2s_number(functions: Any, ctx: Any, broker: Any, clock: Any, status: EntryStatus) -> int:
    """p1's and p2's payments deferred for orders not submitted yet; then p1's entry names p2's number (p1's own
    message gone with the queue it was on), in ``status``."""
    send(broker, notification("p1"))
    send(broker, notification("p2", notification_id="n-2"))
    deliver_all(functions, broker)
    p2s: int = next(e.sequence_number for e in ctx.deferrals.get("p2").entries)

    def renumbered(doc: DeferralDocument) -> DeferralDocument:
        return replace(doc, entries=[replace(e, sequence_number=p2s, status=status) for e in doc.entries])

    update_deferrals(ctx.deferrals, "p1", renumbered, clock.now())
    return p2s


def test_a_discard_of_one_orders_payment_leaves_another_orders_payment_at_its_number_alone(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    p2s = _p1_names_p2s_number(functions, ctx, broker, clock, EntryStatus.DEFERRED)
    done = discard_deferred(ctx, "p1", p2s, "ops@contoso.example", "refunded")
    assert done.outcome == "refused" and "is not the payment notification recorded for order p1" in done.why
    assert broker.dead_letters(ORDERS_QUEUE) == []  # before: p2's payment, dead-lettered DiscardedByOperator
    assert p2s in deferred_sequence_numbers(broker)
    assert ctx.deferrals.get("p1").entry(p2s).status is EntryStatus.DEFERRED  # nothing written


def test_finishing_one_orders_applied_entry_does_not_complete_another_orders_payment(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    p2s = _p1_names_p2s_number(functions, ctx, broker, clock, EntryStatus.APPLIED)
    entry = ctx.deferrals.get("p1").entry(p2s)
    with broker.deferred_store.open(ORDERS_QUEUE) as receiver:
        assert finish_as_recorded(ctx, receiver, "p1", entry) is False  # before: True, p2's payment completed
    assert p2s in deferred_sequence_numbers(broker)  # still waiting for p2
    assert ctx.deferrals.get("p2").entry(p2s).status is EntryStatus.DEFERRED
