"""A payment notification recorded as waiting for its order whose second look meets a write that may have
landed (``StoreOutcomeUnknown``: a lost response, a timeout, a 500) is abandoned, not deferred all the same.
For an order refused by the pending cap that write is the refusal's (``resolve_refused``): landed, it
resolved the entry ``DeadLettered`` before its alert was sent. Deferred all the same (red team on 1e5441b),
the look again sent with it found the entry resolved and did nothing: the message stayed deferred until the
peek sweep settled it as recorded, ten minutes and more later, and the ``NotificationForRejectedOrder``
alert was never sent. Abandoned, its redelivery decides it again (the refusal found written), sends the
alert and dead-letters it. Through the registered trigger, the in-process broker and the Cosmos protocol
server."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cosmos.errors import StoreOutcomeUnknown
from contracts.names import ORDERS_QUEUE
from domain.deferral import EntryStatus
from tests.contexts import context_with
from tests.deferral.support import alerts, deferred_sequence_numbers, deliver, deliver_all, notification, send
from tests.deferral.test_deferred_all_the_same_looks_again import refused

pytestmark = pytest.mark.cosmos


class SaveLandsUnanswered:
    """The deferral log; its ``number``-th ``save`` is written, and then its response is lost."""

    def __init__(self, log: Any, number: int) -> None:
        self._log, self._left = log, number

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def save(self, doc: Any) -> Any:
        written = self._log.save(doc)
        self._left -= 1
        if self._left == 0:
            raise StoreOutcomeUnknown("Cosmos DB did not answer (the write landed)")
        return written


def test_a_refusal_write_whose_response_is_lost_is_decided_again_with_its_alert(
    functions: Any, ctx: Any, broker: Any, clock: Any, monkeypatch: Any
) -> None:
    refused(functions, ctx, broker, monkeypatch)
    lossy = context_with(ctx, deferrals=SaveLandsUnanswered(ctx.deferrals, 2))  # the 1st save records it
    send(broker, notification())
    assert deliver(functions, broker)
    context_with(lossy, deferrals=ctx.deferrals)
    [entry] = ctx.deferrals.get("p1").entries
    assert entry.status is EntryStatus.DEAD_LETTERED  # the refusal's write landed, its alert not sent yet

    deliver_all(functions, broker)  # its redelivery
    clock.advance(ctx.settings.defer_retry_delay)
    deliver_all(functions, broker)  # and anything scheduled meanwhile (a look again)
    assert deferred_sequence_numbers(broker) == []
    [dead] = broker.dead_letters(ORDERS_QUEUE)
    assert (dead.sequence_number, dead.reason) == (entry.sequence_number, "OrderRejected")
    assert [a["kind"] for a in alerts(broker)].count("NotificationForRejectedOrder") == 1
