"""Red team of 10ee105, through the real runtime: one and the same review decision ends an order
differently depending on whether the attempt died between its close of the review and its next write.

The supervisor carries out a decision left by an expired attempt "as the attempt itself would have"
(``domain.compensation.act_on_left_decision``), but it reads only the action written in
``ReviewClosed``; the live attempt (orchestrators/scheduler.py) does not always do that action:

- ``alternative`` on ``arrange-shipment`` (no fallback agent) is ``Action.FAIL`` in
  ``_handle_permanent_failure``; the supervisor retries it, and the next attempt runs the pivot step
  (the shipment) again;
- a second review of the attempt left unanswered compensates (``_review``: "reviews not answered in
  time twice"), while its ``ReviewClosed`` records the configured default (``retry``); the supervisor
  retries it.

Each ``test_control_*`` shows what the live attempt does (it passes); each ``test_*_after_an_outage``
states that the same decision must end the same way when the attempt died after its close (it fails on
10ee105).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from adapters.cosmos.state_store import StateStore
from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from contracts.names import ORDERS_QUEUE
from domain.records import StateRecord
from domain.review import REVIEW_CLOSED, decide_by_time, pending_review
from domain.states import ProcessState
from tests.operations.harness import OPERATOR, OpsHarness
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


class StoreThatFailsAfterTheClose:
    """The state store, failing every replace but the attempt's ``ReviewClosed`` while ``armed``: the
    attempt closes its review, then an outage longer than its write retries ends it."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self.armed = True

    def replace(self, record: StateRecord) -> StateRecord:
        last = record.history[-1] if record.history else None
        if self.armed and not (last is not None and last.event == REVIEW_CLOSED and last.by == record.locked_by):
            raise StoreUnavailable("state store: 503 on replace")
        return self._store.replace(record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _harness(cosmos_db: Any, declined: tuple[str, ...], **settings: str) -> OpsHarness:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR, REVIEW_TIMEOUT_SECONDS="600", **settings)
    assert made.ctx is not None
    refuse = SimulatorConfig(permanent_error_rate=1.0)
    made.change_context(remote=remote_services(made.ctx.settings, made.clock, dict.fromkeys(declined, refuse), seed=3))
    return made


def _submit(made: OpsHarness, order_id: str) -> None:
    body = order(orderId=order_id, lines=[{"sku": "SKU-9", "quantity": 1, "unitPriceCents": 150000}])
    made.send(ORDERS_QUEUE, json.dumps(body), order_id)
    made.run_until_idle()


def _deadline(made: OpsHarness, order_id: str) -> tuple[str, datetime]:
    assert made.ctx is not None
    record = made.ctx.states.get(order_id)
    assert record is not None
    pending = pending_review(record)
    assert pending is not None, [(h.event, h.by, h.detail) for h in record.history[-4:]]
    when = decide_by_time(pending)
    assert when is not None
    return pending.review_id, when


def _die_after_the_close(made: OpsHarness, order_id: str, deadline: datetime) -> None:
    """The attempt closes its review at ``deadline``, then every write fails past its retries; the store
    comes back and the supervisor runs past the record's ``completeBy``."""
    assert made.ctx is not None
    real = made.ctx.states
    store = StoreThatFailsAfterTheClose(real)
    made.change_context(states=store)
    made.host.run_until(deadline + timedelta(seconds=40))
    made.run_until_idle()
    record = real.get(order_id)
    assert record is not None
    assert record.history[-1].event == REVIEW_CLOSED, record.history[-1]
    store.armed = False
    made.change_context(states=real)


def _state(made: OpsHarness, order_id: str) -> StateRecord:
    assert made.ctx is not None
    record = made.ctx.states.get(order_id)
    assert record is not None
    return record


# --- alternative at the shipment, which has no fallback agent ------------------------------------------


@pytest.fixture
def shipment_review(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = _harness(cosmos_db, ("shipping",), REVIEW_DEFAULT_ACTION="alternative")
    _submit(made, "o-ship")
    yield made
    made.close()


def test_control_the_live_attempt_fails_an_alternative_at_the_shipment(shipment_review: OpsHarness) -> None:
    review_id, deadline = _deadline(shipment_review, "o-ship")
    assert ":arrange-shipment:" in review_id
    shipment_review.host.run_until(deadline + timedelta(seconds=5))
    shipment_review.run_until_idle()
    assert _state(shipment_review, "o-ship").process_state is ProcessState.ERROR


def test_an_alternative_at_the_shipment_left_by_an_attempt_that_died_fails_as_well_after_an_outage(
    shipment_review: OpsHarness,
) -> None:
    """Expected: Error, as in the control (nothing shipped). On 10ee105: the supervisor retries the order, and
    once the shipping service answers again the next attempt ships it: Processed."""
    assert shipment_review.ctx is not None
    _, deadline = _deadline(shipment_review, "o-ship")
    _die_after_the_close(shipment_review, "o-ship", deadline)
    # the shipping service is fine again by the time the order is retried
    shipment_review.change_context(remote=remote_services(shipment_review.ctx.settings, shipment_review.clock, seed=3))
    grace = shipment_review.ctx.settings.start_grace
    shipment_review.host.run_until(deadline + grace + timedelta(minutes=3))
    shipment_review.run_until_idle()

    record = _state(shipment_review, "o-ship")
    assert record.process_state is ProcessState.ERROR, (
        f"the live attempt fails this order; after the outage it is {record.process_state.value}: "
        f"{[(h.event, h.by) for h in record.history[-6:]]}"
    )


# --- a second review of the attempt left unanswered -----------------------------------------------------


@pytest.fixture
def two_reviews(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = _harness(cosmos_db, ("payment", "payment_backup"), REVIEW_DEFAULT_ACTION="retry")
    _submit(made, "o-twice")
    _, first = _deadline(made, "o-twice")
    made.host.run_until(first + timedelta(seconds=5))  # default retry: the step again, then review 2
    made.run_until_idle()
    yield made
    made.close()


def test_control_the_live_attempt_compensates_after_two_unanswered_reviews(two_reviews: OpsHarness) -> None:
    review_id, deadline = _deadline(two_reviews, "o-twice")
    assert review_id.endswith(":review:2")
    two_reviews.host.run_until(deadline + timedelta(seconds=5))
    two_reviews.run_until_idle()
    assert _state(two_reviews, "o-twice").process_state in (ProcessState.COMPENSATING, ProcessState.COMPENSATED)


def test_two_unanswered_reviews_compensate_as_well_when_the_attempt_died_after_its_close(
    two_reviews: OpsHarness,
) -> None:
    """Expected: compensated, as in the control. On 10ee105: the supervisor reads ``retry`` in the second
    close and retries the order; the next attempt declines again and pauses for a new review (its count
    of unanswered reviews starts at 0), so the order keeps the customer's money waiting on reviews."""
    assert two_reviews.ctx is not None
    review_id, deadline = _deadline(two_reviews, "o-twice")
    assert review_id.endswith(":review:2")
    _die_after_the_close(two_reviews, "o-twice", deadline)
    grace = two_reviews.ctx.settings.start_grace
    two_reviews.host.run_until(deadline + grace + timedelta(minutes=3))
    two_reviews.run_until_idle()

    record = _state(two_reviews, "o-twice")
    assert record.process_state in (ProcessState.COMPENSATING, ProcessState.COMPENSATED), (
        f"the live attempt compensates; after the outage it is {record.process_state.value} "
        f"(attempt {record.attempt}, failureCount {record.failure_count}): "
        f"{[(h.event, h.by) for h in record.history[-5:]]}"
    )
