"""Red team (rt-marks): an alert mark that does not map (a hand edit, a later release's shape read after a rollback)
must page, as a mark that cannot be read does (docs/supervisor.md, "One page per problem: alert marks"): its
``DocumentError`` is no ``StoreError``, so ``already_paged`` let it out of the raiser. A conflicting submission's
trigger failed (the message abandoned, redelivered, at last dead-lettered ``MaxDeliveryCountExceeded``) and its
``ConflictingOrderData`` was never raised; the owed sweep, the unreadable-record alert and the status courier's
give-up failed the same way, each run, for as long as the mark stayed (the ops API lists no marks: nobody sees it).

Now the store reads such a mark as one long over, with its stored version: the occurrence pages, and the mark
written after the send replaces the bad one on its etag, so the next occurrence is held again.

Driven through the registered ``submit_order`` trigger, over the real Cosmos SDK (the local protocol server)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.clock import ManualClock
from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from tests.fakes import RecordingSender
from tests.submission.corpus import order
from tests.submission.test_redteam47_conflict_storm import _submit

pytestmark = pytest.mark.cosmos


def _marks(cosmos_db: Any) -> list[dict[str, Any]]:
    state = cosmos_db.get_container_client(STATE_CONTAINER)
    query = "SELECT * FROM c WHERE c.kind = 'AlertMark'"
    return list(state.query_items(query, enable_cross_partition_query=True))


def test_a_mark_that_does_not_map_pages_and_is_replaced(
    functions: dict[str, Any], app_context: Any, sender: RecordingSender, clock: ManualClock, cosmos_db: Any
) -> None:
    _submit(functions, order())
    _submit(functions, order(shipTo="2 Other St"))  # the first conflict: paged, marked
    [mark] = _marks(cosmos_db)
    state = cosmos_db.get_container_client(STATE_CONTAINER)
    bad = {k: v for k, v in mark.items() if not k.startswith("_")} | {"alertedAt": "yesterday"}
    state.replace_item(mark["id"], bad)
    clock.advance(timedelta(minutes=6))
    kind, details = _submit(functions, order(shipTo="2 Other St")).only  # before: DocumentError out of the trigger
    assert (kind, details["reason"]) == ("deadletter", "ConflictingOrderData")
    assert [a["kind"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE)] == ["ConflictingOrderData"] * 2
    [healed] = _marks(cosmos_db)
    assert healed["alertedAt"] != "yesterday"  # written back whole on the bad one's etag
    clock.advance(timedelta(minutes=6))
    _submit(functions, order(shipTo="2 Other St"))  # held again
    assert len(sender.bodies(OPERATOR_ALERTS_QUEUE)) == 2
