"""Red team 5: the supervisor's isolation of owed notifications (supervisor/owed.py), through the real
runtime (the supervisor's timer trigger every SUPERVISOR_SCHEDULE, the broker's duplicate detection)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE, STATE_CONTAINER
from supervisor import owed
from tests.operations.harness import OPERATOR, OpsHarness
from tests.supervisor.test_redteam_owed_sweep_isolation import _break_the_alert_of, _compensation_rounds_lost

pytestmark = pytest.mark.cosmos


@pytest.fixture
def ops(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    yield made
    made.close()


def test_notifications_stuck_is_alerted_at_most_once_an_hour_per_order(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING. ``_not_delivered`` promises the ``NotificationsStuck`` alert "once an hour per order: its
    id is the hour's", and sends it on every supervisor run (every 30 s); only the MessageId makes it
    once, and Service Bus drops a duplicate MessageId within the queue's duplicate-detection window,
    10 minutes (infra/modules/servicebus.bicep ``duplicateDetectionWindow``), not an hour. Operators get
    the same critical alert every 10 minutes per stuck order (5 in its first hour, 6 an hour after)."""
    assert ops.ctx is not None
    ops.error("o-stuck")
    status, body = ops.post("/api/ops/orders/o-stuck/compensate", {"reason": "fine"})
    assert status == 200, body
    record = _compensation_rounds_lost(ops, "o-stuck")
    assert record.complete_by is not None
    _break_the_alert_of(monkeypatch, "o-stuck")

    ops.host.run_until(record.complete_by + timedelta(minutes=59))  # owed for just under an hour
    stuck = [
        json.loads(m.body)
        for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 1000)
        if json.loads(m.body)["kind"] == "NotificationsStuck"
    ]
    assert len(stuck) >= 1  # the control: the alert is raised after STUCK_ALERT_AFTER
    assert len(stuck) == 1, (
        f"{len(stuck)} NotificationsStuck alerts for o-stuck within its first hour (owed since "
        f"{record.complete_by.isoformat()}, alerted after {owed.STUCK_ALERT_AFTER}): "
        f"{[a['at'] for a in stuck]}"
    )


@pytest.mark.parametrize("poison", [False, True], ids=["control", "poisoned"])
def test_one_expired_record_whose_document_does_not_map_does_not_stop_the_recovery_of_the_others(
    ops: OpsHarness, cosmos_db: Any, poison: bool
) -> None:
    """FINDING. 2a29d6b isolates "every record and every phase": a record's recovery that raises is
    logged and the run goes on. But the scan maps a whole page at once (adapters/cosmos/state_store.py
    ``expired_page``: ``[stored(StateRecord, d) for d in docs]``), so one expired document that does not
    map (schema drift, a hand edit, a timestamp outside ``timefmt``'s years) fails the page;
    ``scan_expired`` drops its cursor and re-raises, ``run_supervisor`` logs ``SupervisorPhaseFailed``
    and goes on with an empty scan. Every run fails the same way (oldest first: that page comes first),
    so no expired attempt is ever recovered, and nothing alerts: the run no longer fails, and no alert
    rule reads ``SupervisorPhaseFailed`` (infra/modules/alerts.bicep)."""
    assert ops.ctx is not None
    poisoned = ops.processing("o-poisoned")
    ops.clock.advance_to(ops.clock.now() + timedelta(seconds=1))
    innocent = ops.processing("o-innocent")
    if poison:
        container = cosmos_db.get_container_client(STATE_CONTAINER)
        doc = container.read_item(poisoned.order_id, partition_key=poisoned.order_id)
        container.replace_item(doc["id"], {**doc, "failureCount": "several"})  # no longer a StateRecord

    ops.host.run_until(ops.clock.now() + timedelta(minutes=5))  # the start grace passes, the supervisor runs

    record = ops.ctx.states.get("o-innocent")
    assert record is not None
    alerted = {json.loads(m.body).get("orderId") for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 1000)}
    assert record.history[-1].by == "supervisor" or record.locked_by != innocent.locked_by, (
        f"o-innocent expired at {innocent.complete_by} and is still {record.process_state.value} for "
        f"{record.locked_by} after 5 minutes of supervisor runs (alerts for {alerted})"
    )


def test_notifications_sent_but_not_acknowledged_are_not_alerted_as_undelivered_nor_sent_every_window(
    ops: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING (minor). ``deliver_owed`` now wraps send and acknowledge in one ``except Exception``: when
    the send went out and the acknowledgement fails with an error ``acknowledge`` does not name (a
    Cosmos DB 413/403/400 on the replace: ``mapped_errors`` leaves those as they are), the record stays
    owed, ``OwedNotificationsFailed`` says "not delivered", the ``CompensationFailed`` alert (and the
    submitter's status) go out again whenever the 10-minute duplicate window lets them through, and
    after 15 minutes ``NotificationsStuck`` tells operators they "could not be delivered"."""
    assert ops.ctx is not None
    ops.error("o-unacked")
    status, body = ops.post("/api/ops/orders/o-unacked/compensate", {"reason": "fine"})
    assert status == 200, body
    record = _compensation_rounds_lost(ops, "o-unacked")
    assert record.complete_by is not None

    def refused(ctx: Any, record: Any) -> Any:
        raise RuntimeError("Cosmos DB 413: the request entity is too large")

    monkeypatch.setattr(owed, "acknowledge", refused)
    ops.host.run_until(record.complete_by + timedelta(minutes=40))
    kinds = [json.loads(m.body)["kind"] for m in ops.broker.peek(OPERATOR_ALERTS_QUEUE, 1000)]
    assert kinds.count("CompensationFailed") >= 1  # the control: it was sent
    assert kinds.count("CompensationFailed") == 1 and "NotificationsStuck" not in kinds, kinds
