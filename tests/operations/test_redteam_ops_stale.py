"""The ops API under Cosmos DB Session consistency: an operator's request is served by any instance, whose client
has no session token for the writes another instance (or an earlier request) made, so its reads may come from a
replica one write behind (the runner's model, ``localrun/stale_reads.py``, here at rate 1: every read within the
lag of another client's write is the version before it). A conditional write catches a stale read; an answer
given on a read alone does not."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, NamedTuple

import azure.durable_functions as df
import pytest

from adapters.cosmos.order_store import CosmosOrderStore
from adapters.cosmos.state_store import CosmosStateStore
from adapters.remote.simulators.ledger import Ledger
from contracts.names import ORDERS_CONTAINER, STATE_CONTAINER
from domain.review import noted_answer, pending_review
from localrun.audit import Audit, AuditedOrderStore, AuditedStateStore, CosmosFaults
from localrun.profile import Profile
from localrun.stale_reads import StaleReads
from operations import instances
from orchestrators.names import SCHEDULER
from tests.operations.harness import OPERATOR, OpsHarness, first_review
from tests.operations.test_prepaid_review_alternative import submit_paid_and_refused

pytestmark = pytest.mark.cosmos

LAG = timedelta(seconds=2)
ANSWER = {"reviewId": first_review("o-gone"), "action": "fail", "reason": "too risky"}


class Client:
    """One instance's Cosmos client (hashable and weakly referenced, as the runner's are)."""


class Instances:
    """Which instance of the app serves what comes next (``serving``: its name): each its own Cosmos client,
    its own session."""

    def __init__(self) -> None:
        self.serving = "setup"
        self._clients: dict[str, Client] = {}

    def __call__(self) -> object:
        return self._clients.setdefault(self.serving, Client())


class Stale(NamedTuple):
    ops: OpsHarness  # its states: served as from a replica behind, within the lag of another client's write
    serving: Instances
    injected: Counter[str]  # cosmos_stale_reads: how many reads were served stale
    latest: CosmosStateStore  # the record as it is (the write region's)


@pytest.fixture
def stale(cosmos_db: Any) -> Iterator[Stale]:
    ops = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    audit, injected, serving = Audit(), Counter[str](), Instances()
    reads = StaleReads(1.0, LAG, random.Random(1), ops.clock.now, serving, injected)
    faults = CosmosFaults(Profile(), random.Random(1), audit)
    raw = CosmosStateStore(cosmos_db.get_container_client(STATE_CONTAINER))
    ops.change_context(states=AuditedStateStore(raw, ops.clock, faults, audit, reads))
    yield Stale(ops, serving, injected, raw)
    ops.close()


def _attempt(takes_events: bool) -> Any:
    async def state(client: Any, instance: str) -> instances.AttemptState:
        return instances.AttemptState(takes_events=takes_events, name=SCHEDULER)

    return state


def test_an_answer_taken_back_and_posted_again_on_a_replica_behind_the_take_back_is_not_left_to_the_supervisor(
    stale: Stale, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING. The paused attempt is gone (``raise_event`` 404): the first answer's note is taken back and the
    operator hears 409. Posted again at once (the console's button, another tab), another instance reads the
    record from a replica without the take-back: the note looks like it stands, the attempt is gone, so
    ``left_to_supervisor`` answered 200 ``carriedOutBy: supervisor``, on that read alone. Nothing stands: the
    supervisor retries the order as a plain expired attempt, the operator's ``fail`` is never carried out. Now
    that 200 is given only once a conditional write of the version read lands (it is the latest); a 412 on every
    read is a 503 (post it again), and once the replicas caught up the answer is the 409 a gone attempt gets."""
    ops, serving, injected, latest = stale
    assert ops.ctx is not None
    ops.awaiting_review("o-gone")  # written only: the attempt does not exist, raise_event answers 404
    ops.clock.advance_to(ops.clock.now() + LAG * 2)
    monkeypatch.setattr(instances, "attempt_state", _attempt(True))  # it looked running, then the raise: 404
    serving.serving = "instance-a"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert status == 409 and "taken back" in body["error"], body

    monkeypatch.setattr(instances, "attempt_state", _attempt(False))
    serving.serving = "instance-b"  # posted again at once, served by another instance
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert injected["cosmos_stale_reads"] >= 1
    assert status == 503 and "post the same answer again" in body["error"], body  # was 200, carriedOutBy: supervisor
    record = latest.get("o-gone")
    assert record is not None and pending_review(record) is not None  # the note was taken back: nothing stands
    assert noted_answer(record) is None

    ops.clock.advance_to(ops.clock.now() + LAG * 2)  # the replicas caught up
    serving.serving = "instance-c"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert status == 409 and "not running" in body["error"], body


PREPAID = "o-prepaid-rv"
ORDER_LAG = timedelta(seconds=60)  # the profile's longest (cosmos.stale_read_lag_ms)


def test_a_prepaid_orders_review_read_without_its_order_is_not_offered_nor_answered_the_alternative(
    cosmos_db: Any,
) -> None:
    """FINDING. A prepaid order's payment review takes no ``alternative`` (no other provider holds the customer's
    payment; the attempt reads it as ``fail``). The ops API tells by the order document's ``prepaid``, read from the
    orders container, whose replica another instance reads may not have the create yet (the record, in the state
    container, it has): a 404 read as "not prepaid", so the page offered ``alternative`` and the answer was 200
    ``alternative``, which the attempt carried out as ``fail`` (Error). The order is written before its record, so a
    404 for the order of a record is a read behind: the page offers what every order takes, the answer is 503."""
    ops, ledger = _paused_with_orders_behind(cosmos_db)
    serving, injected = ops.serving, ops.injected
    try:
        assert ops.ctx is not None
        serving.serving = "instance-b"  # another instance: its replica of the order has not got the create
        status, detail = ops.get(f"/api/ops/orders/{PREPAID}")
        assert status == 200 and injected["cosmos_stale_reads"] >= 1, detail
        assert detail["review"]["choices"] == ["compensate", "retry", "fail"], detail["review"]  # was with alternative

        review_id = detail["review"]["reviewId"]
        answer = {"reviewId": review_id, "action": "alternative", "reason": "use the backup"}
        status, body = ops.post(f"/api/ops/orders/{PREPAID}/review", answer)
        assert status == 503 and "post" in body["error"], body  # was 200 alternative, carried out as fail
        record = ops.ctx.states.get(PREPAID)
        assert record is not None and pending_review(record) is not None  # nothing noted: it still waits

        ops.clock.advance_to(ops.clock.now() + ORDER_LAG)  # the replicas caught up: refused, saying why
        serving.serving = "instance-c"
        status, body = ops.post(f"/api/ops/orders/{PREPAID}/review", answer)
        assert status == 409 and "prepaid" in body["error"], body
        assert ledger.effects(PREPAID, service="payment_backup") == []
    finally:
        ops.close()


class _OrdersBehind(OpsHarness):
    serving: Instances
    injected: Counter[str]


def _paused_with_orders_behind(cosmos_db: Any) -> tuple[_OrdersBehind, Ledger]:
    """``test_prepaid_review_alternative``'s paused prepaid order (``submit_paid_and_refused``), its orders read
    through the stale-read model (``ORDER_LAG``); its state records read as they are (another partition, a replica
    caught up)."""
    ops = _OrdersBehind(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, REVIEW_TIMEOUT_SECONDS="600")
    assert ops.ctx is not None
    ops.serving, ops.injected = Instances(), Counter()
    audit = Audit()
    reads = StaleReads(1.0, ORDER_LAG, random.Random(1), ops.clock.now, ops.serving, ops.injected)
    orders = CosmosOrderStore(cosmos_db.get_container_client(ORDERS_CONTAINER))
    ops.change_context(orders=AuditedOrderStore(orders, CosmosFaults(Profile(), random.Random(1), audit), audit, reads))
    ledger = submit_paid_and_refused(ops, PREPAID)
    return ops, ledger


@pytest.mark.parametrize(
    ("action", "make"),
    [("resubmit", OpsHarness.error), ("compensate", OpsHarness.error), ("cancel", OpsHarness.processing)],
)
def test_an_action_posted_again_on_an_instance_whose_replica_is_behind_it_is_not_refused(
    stale: Stale, action: str, make: Any
) -> None:
    """FINDING. The same action by the same operator posted twice (a double click, a second tab, a 503 before) is
    answered 200 ``repeated`` (README). Served by another instance whose replica has not got the first post's write,
    the second read the order from before it: its write was a 412, so was the one on its read again, and it answered
    409 "changed while you acted", which the console shows as "refused", though the action was taken. A 412 on
    every read says only that this request could not read the latest: 503, post it again (nothing written now)."""
    ops, serving, injected, latest = stale
    make(ops, "o-twice")
    ops.clock.advance_to(ops.clock.now() + LAG * 2)
    serving.serving = "instance-a"
    status, body = ops.post(f"/api/ops/orders/o-twice/{action}", {"reason": "customer called"})
    assert status == 200 and "repeated" not in body, body
    taken = latest.get("o-twice")

    serving.serving = "instance-b"  # posted again at once, served by another instance
    status, body = ops.post(f"/api/ops/orders/o-twice/{action}", {"reason": "customer called"})
    assert injected["cosmos_stale_reads"] >= 2
    assert status == 503 and "post" in body["error"], body  # was 409 "changed while you acted"
    assert latest.get("o-twice") == taken  # nothing written

    ops.clock.advance_to(ops.clock.now() + LAG * 2)  # the replicas caught up
    serving.serving = "instance-c"
    status, body = ops.post(f"/api/ops/orders/o-twice/{action}", {"reason": "customer called"})
    assert status == 200 and body.get("repeated") is True, body


def test_an_answer_to_a_review_the_replica_has_not_got_yet_is_not_refused_as_unknown(
    stale: Stale, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING (``localrun simulate`` with stale reads and an operator answering reviews). The operator read the
    order, paused for review, from one instance; the answer went to another, whose replica had the record from
    before the pause: "order ... is Processing and does not wait for review ...", 409, and the runner's operator
    gave up the review, which took its default. A record that knows nothing of the review an answer names is no
    verdict until a conditional write of it proves it the latest: else 503, post it again."""
    ops, serving, injected, _latest = stale
    raised: list[str] = []

    async def accepted(self: Any, instance_id: str, event_name: str, event_data: Any = None) -> None:
        raised.append(str(event_data["action"]))

    monkeypatch.setattr(instances, "attempt_state", _attempt(True))
    monkeypatch.setattr(df.DurableOrchestrationClient, "raise_event", accepted)
    ops.awaiting_review("o-gone")  # its pause written just now
    serving.serving = "instance-b"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert injected["cosmos_stale_reads"] >= 1
    assert status == 503 and "post the same answer again" in body["error"], body  # was 409 "does not wait for"
    assert raised == []

    ops.clock.advance_to(ops.clock.now() + LAG * 2)  # the replicas caught up
    serving.serving = "instance-c"
    status, body = ops.post("/api/ops/orders/o-gone/review", ANSWER)
    assert status == 200 and body["decision"] == "fail", body
    assert raised == ["fail"]
