"""Red team: an operator's reason that the app's messages cannot carry, and the supervisor's sweep of
owed notifications, through the real runtime (the ops API and the supervisor's timer trigger)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.compensation import claim_compensation
from domain.records import StateRecord
from domain.states import ProcessState
from supervisor import owed
from supervisor.owed import owe_notifications
from tests.operations.harness import OPERATOR, OpsHarness

pytestmark = pytest.mark.cosmos


@pytest.fixture
def ops(cosmos_db) -> Iterator[OpsHarness]:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    yield made
    made.close()


def _compensation_rounds_lost(ops: OpsHarness, order_id: str) -> StateRecord:
    """What the supervisor writes when every compensation round misses its deadline
    (supervisor/compensation_rounds.py ``_claim_or_wait``): the next claim, MAX_FAILURES times, then
    CompensationFailed with ``lastError`` "compensation did not finish in N rounds; last: <lastError>",
    its alert and status owed."""
    assert ops.ctx is not None
    record = ops.ctx.states.get(order_id)
    assert record is not None
    rounds = ops.ctx.settings.max_failures
    for _ in range(rounds + 1):
        moved = owe_notifications(claim_compensation(record, ops.clock.now(), timedelta(0), rounds, "supervisor"))
        record = ops.ctx.states.replace(replace(moved, version=record.version))
        if record.process_state is ProcessState.COMPENSATION_FAILED:
            return record
    raise AssertionError(f"{order_id} never CompensationFailed")


def _poison(ops: OpsHarness, order_id: str, last_error: str) -> None:
    assert ops.ctx is not None
    record = ops.ctx.states.get(order_id)
    assert record is not None
    ops.ctx.states.replace(replace(record, last_error=last_error))


def _break_the_alert_of(monkeypatch: pytest.MonkeyPatch, order_id: str) -> None:
    """The owed alert of ``order_id`` cannot be built: an exception no handler names."""
    summary = owed._summary

    def broken(record: StateRecord, kind: str) -> str:
        if record.order_id == order_id:
            raise RuntimeError(f"the alert of {order_id} cannot be built")
        return summary(record, kind)

    monkeypatch.setattr(owed, "_summary", broken)


def test_one_record_the_alert_cannot_carry_does_not_stop_the_owed_alerts_of_the_others(ops):
    """FINDING. The ops API takes a reason holding a lone surrogate (JSON ``"\\udc80"``; operations/web.py
    ``parse_action_body``) and ``compensate`` writes it to ``lastError``. When that order's compensation
    fails, the supervisor's sweep of owed notifications (supervisor/owed.py ``deliver_due``) builds its
    ``CompensationFailed`` alert with ``lastError`` in the summary: ``OperatorAlert`` refuses the text
    (pydantic ValidationError, notifications/alerts.py ``_build``), and ``deliver_due`` isolates records
    only from ``StoreUnavailable``. Every supervisor run fails there, and the records after it in the
    page (oldest first) never get their alert: here ``o-c-later`` waits forever."""
    assert ops.ctx is not None
    for order_id, reason in (
        ("o-a-earlier", "fine"),
        ("o-b-surrogate", "card \udc80 blocked"),
        ("o-c-later", "fine"),
    ):
        ops.error(order_id)
        status, body = ops.post(f"/api/ops/orders/{order_id}/compensate", {"reason": "fine"})
        assert status == 200, body
        # The ops API refuses such a reason now (test_redteam_hostile_requests.py): write it as a
        # record written before that fix, or by any other writer, holds it (on the failed record: each round's claim
        # starts its lastError afresh, from why the order is compensated)
        _compensation_rounds_lost(ops, order_id)
        _poison(ops, order_id, reason)
        ops.clock.advance_to(ops.clock.now() + timedelta(seconds=1))  # the sweep takes them oldest first

    ops.host.run_until(ops.clock.now() + timedelta(minutes=5))  # the supervisor's timer fires

    alerts = {
        json.loads(m.body).get("orderId"): json.loads(m.body) for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 100)
    }
    assert "o-a-earlier" in alerts  # the control: the sweep runs and delivers
    assert "o-c-later" in alerts, f"the CompensationFailed alert of o-c-later was never sent (alerted: {set(alerts)})"
    assert ops.ctx.states.get("o-c-later").complete_by is None  # acknowledged: nothing owed any more
    # and the poisoned record's own alert goes out too, its text made carriable (notifications/alerts.py)
    assert "o-b-surrogate" in alerts and "card \ufffd blocked" in alerts["o-b-surrogate"]["summary"]
    assert ops.ctx.states.get("o-b-surrogate").complete_by is None


def test_a_record_whose_owed_alert_cannot_be_built_for_any_reason_stays_owed_and_the_others_are_delivered(
    ops, monkeypatch
):
    """Not only a text the alert cannot carry: any exception while one record's alert and status are
    built or sent leaves that record owed (``OwedNotificationsFailed``) and the sweep goes on."""
    assert ops.ctx is not None
    for order_id in ("o-a-earlier", "o-b-broken", "o-c-later"):
        ops.error(order_id)
        status, body = ops.post(f"/api/ops/orders/{order_id}/compensate", {"reason": "fine"})
        assert status == 200, body
        _compensation_rounds_lost(ops, order_id)
        ops.clock.advance_to(ops.clock.now() + timedelta(seconds=1))
    _break_the_alert_of(monkeypatch, "o-b-broken")

    ops.host.run_until(ops.clock.now() + timedelta(minutes=5))

    alerted = {json.loads(m.body).get("orderId") for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 100)}
    assert {"o-a-earlier", "o-c-later"} <= alerted, alerted
    assert "o-b-broken" not in alerted
    assert ops.ctx.states.get("o-c-later").complete_by is None
    assert ops.ctx.states.get("o-b-broken").complete_by is not None  # still owed: the next sweep tries again


def test_one_record_the_alert_cannot_carry_does_not_stop_the_compensation_rounds_of_the_others(ops, monkeypatch):
    """FINDING, the same cause, worse effect: ``run_supervisor`` (supervisor/run.py) raises at
    ``deliver_due`` after it has claimed the due compensation rounds, so the trigger
    (supervisor/blueprint.py) never reaches ``terminate_expired`` or ``start_compensations``: every
    round claimed while the poisoned record is owed is left unstarted, counted as a lost round at the
    next run, until those orders too are CompensationFailed. Here an order an operator sends to
    compensation with an ordinary reason never gets its round started."""
    assert ops.ctx is not None
    ops.error("o-poisoned")
    status, body = ops.post("/api/ops/orders/o-poisoned/compensate", {"reason": "fine"})
    assert status == 200, body
    _compensation_rounds_lost(ops, "o-poisoned")
    _break_the_alert_of(monkeypatch, "o-poisoned")  # any exception (a lone surrogate is carried now)

    ops.error("o-innocent")
    status, body = ops.post("/api/ops/orders/o-innocent/compensate", {"reason": "customer asked for a refund"})
    assert status == 200, body
    ops.host.run_until(ops.clock.now() + timedelta(minutes=5))

    record = ops.ctx.states.get("o-innocent")
    assert record.process_state is ProcessState.COMPENSATED, (
        f"o-innocent is {record.process_state.value} after 5 minutes of supervisor runs "
        f"(failures {record.failure_count}, lastError {record.last_error!r})"
    )


def test_notifications_that_keep_failing_are_alerted_without_what_the_record_holds(ops, monkeypatch):
    """After ``STUCK_ALERT_AFTER`` of failed sweeps, a ``NotificationsStuck`` alert names the order."""
    assert ops.ctx is not None
    ops.error("o-stuck")
    status, body = ops.post("/api/ops/orders/o-stuck/compensate", {"reason": "fine"})
    assert status == 200, body
    _compensation_rounds_lost(ops, "o-stuck")
    _break_the_alert_of(monkeypatch, "o-stuck")

    ops.host.run_until(ops.clock.now() + timedelta(minutes=5))
    kinds = [json.loads(m.body)["kind"] for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 100)]
    assert "NotificationsStuck" not in kinds  # a few failed sweeps: logged only

    ops.host.run_until(ops.clock.now() + owed.STUCK_ALERT_AFTER)
    stuck = [
        json.loads(m.body)
        for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 100)
        if json.loads(m.body)["kind"] == "NotificationsStuck"
    ]
    assert [a["orderId"] for a in stuck] == ["o-stuck"], stuck
    assert ops.ctx.states.get("o-stuck").complete_by is not None  # still owed
