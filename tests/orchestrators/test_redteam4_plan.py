"""Red team of scheduler v3 (f01544f): the attempt's plan is read where the record is claimed.

Each test names the guarantee it checks; a failing test is a finding (see the red-team report)."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.errors import StoreUnavailable
from domain import transitions
from domain.states import ProcessState
from orchestrators import names, starter
from settings import Settings
from supervisor.recovery import recover
from tests.durable_history import History
from tests.orchestrators.support import T0, sample_order

V2 = "process_order_v2"

pytestmark = pytest.mark.cosmos


class UnavailableOrders:
    """The orders container answering 503/429 (``StoreUnavailable``) to every read."""

    def get(self, order_id: str) -> None:
        raise StoreUnavailable(f"Cosmos DB 503 reading order {order_id}")


def test_a_transient_order_read_at_the_claim_is_not_counted_as_a_failure_of_the_order(app_context, clock):
    """Under v2 the order was read by ``load_order``, an activity retried on durable timers (2 s, 10 s)
    before anything was counted. Under v3 the starter reads it once right after the claim; one 503/429
    leaves the claim unstarted, and after the start grace the supervisor counts it as a failed attempt
    of the order: one of its MAX_FAILURES, for a store blip, with no step ever run."""
    ctx = dataclasses.replace(app_context, settings=Settings.from_env({}, MAX_FAILURES="3"))
    ctx.orders.create_or_verify(sample_order("o0"))
    ctx.states.create(transitions.new_record("o0", None, clock.now()))
    flaky = dataclasses.replace(ctx, orders=UnavailableOrders())

    assert starter.sweep(flaky) == []  # not started: the order could not be read
    clock.advance(ctx.settings.start_grace + timedelta(seconds=1))
    for expired in [r for r in [ctx.states.get("o0")] if r is not None and transitions.is_expired(r, clock.now())]:
        recover(ctx, expired)

    record = ctx.states.get("o0")
    assert record is not None
    assert record.failure_count == 0, (
        f"a transient order read at the claim cost the order a counted failure ({record.failure_count} of "
        f"{ctx.settings.max_failures}); last error: {record.last_error!r}"
    )


def test_transient_order_reads_at_the_claims_never_escalate_an_order_that_never_ran(app_context, clock):
    """The same, to the end: MAX_FAILURES claims whose order read hit a transient error move a healthy
    order, none of whose steps ever began, to Error (RetriesExhausted alert, Failed status)."""
    ctx = dataclasses.replace(app_context, settings=Settings.from_env({}, MAX_FAILURES="3"))
    ctx.orders.create_or_verify(sample_order("o0"))
    ctx.states.create(transitions.new_record("o0", None, clock.now()))
    flaky = dataclasses.replace(ctx, orders=UnavailableOrders())

    for _ in range(ctx.settings.max_failures):
        record = ctx.states.get("o0")
        assert record is not None
        if record.process_state is not ProcessState.PENDING:
            break
        clock.advance(timedelta(hours=1))  # past any backoff
        assert starter.sweep(flaky) == []
        clock.advance(ctx.settings.start_grace + timedelta(seconds=1))
        claimed = ctx.states.get("o0")
        assert claimed is not None
        recover(ctx, claimed)

    record = ctx.states.get("o0")
    assert record is not None and not record.steps  # no step ever began
    assert record.process_state is not ProcessState.ERROR, (
        f"escalated to Error with no step run, for transient order reads only: {record.last_error!r}"
    )


def test_a_v2_instance_whose_load_order_finds_no_function_after_the_upgrade_retires(functions: dict[str, Any]) -> None:
    """A v2 instance started just before the upgrade: its ``load_order`` message is dispatched after it,
    finds no function (the host fails the activity), and the instance replays on the new app: it must
    continue as new (nothing scheduled against the old history), then settle its record."""
    h = History("o1:1", {"orderId": "o1", "attempt": 1}, start=T0, name=V2)
    h.activity_failed(
        "load_order", "The function 'load_order' doesn't exist, is disabled, or is not an activity function"
    )

    replayed = h.run(functions[V2].func)

    assert replayed.error is None
    assert replayed.new_actions == []
    [restart] = [a for a in replayed.actions if a["type"] == "ContinueAsNew"]
    fresh = History("o1:1", json.loads(restart["input"]), start=T0, name=V2)
    assert [a["functionName"] for a in fresh.run(functions[V2].func).new_actions] == [names.SETTLE_RETIRED_ATTEMPT]


def test_a_v2_shaped_input_reaching_v3_fails_the_attempt_without_a_write(functions: dict[str, Any]) -> None:
    """An input without a plan (``{"orderId", "attempt"}``, as v2 was started with) cannot run under v3:
    the orchestration fails at once, before any activity (no write, no status); the claim it was
    started for is the supervisor's once its start grace has passed."""
    h = History("o1:1", {"orderId": "o1", "attempt": 1}, start=T0, name=names.SCHEDULER)
    replayed = h.run(functions[names.SCHEDULER].func)
    assert replayed.error is not None and "plan" in replayed.error
    assert replayed.new_actions == []


class OrdersFailingFor:
    """The orders container; reading ``bad`` fails with an error the Cosmos adapter does not map to
    ``StoreUnavailable`` (a 403 / 410 / 400 answer, or a document the SDK cannot decode)."""

    def __init__(self, inner: Any, bad: str) -> None:
        self._inner = inner
        self._bad = bad

    def get(self, order_id: str) -> Any:
        if order_id == self._bad:
            raise RuntimeError(f"Cosmos DB 403 reading order {order_id}")
        return self._inner.get(order_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_one_order_read_failing_otherwise_does_not_cost_the_claims_already_made_in_the_batch(app_context, clock):
    """starter.sweep: "Per record: the claims already made in this batch are still returned and
    started". v3 reads each claimed record's order inside ``try_claim``; ``_order_for`` catches only
    ``StoreUnavailable``, and ``sweep`` only that: any other error of one order read escapes the sweep,
    and the claims it had already made (records now Processing) are never started (each a counted
    failure after the start grace)."""
    for i in range(3):
        app_context.orders.create_or_verify(sample_order(f"o{i}"))
        app_context.states.create(transitions.new_record(f"o{i}", None, clock.now()))
    order_ids = [r.order_id for r in app_context.states.claimable(clock.now(), 10)]
    bad = order_ids[1]  # the second record the sweep claims
    ctx = dataclasses.replace(app_context, orders=OrdersFailingFor(app_context.orders, bad))

    try:
        claims = starter.sweep(ctx)
    except Exception as exc:  # the finding: the batch is lost with it
        claimed = [o for o in order_ids if (r := ctx.states.get(o)) is not None and r.locked_by is not None]
        pytest.fail(f"the sweep raised {exc!r}; claimed and never started: {claimed}")
    assert {c.order_id for c in claims} >= {order_ids[0]}
