"""The status courier (``deliver_status_v1``) reads ``answersGiveUp`` from its own input (``OwedStatus.courier_input``)
as an attempt reads it from its: a last try that dies is repeated, every repeat dying is logged ``LastTryLost``, and a
give-up answered ends it (tests/submission/test_status_last_try.py runs the scheduler's, with the activity). Replayed
by the Durable SDK over histories whose tries fail as the host reports a killed worker."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from notifications.status import OwedStatus
from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS, LAST_TRY_REPEATS
from tests.durable_history import History

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
KILLED = "Timeout value of 00:30:00 was exceeded by function: Functions.publish_status"
OWED = OwedStatus(order_id="o1", status="Completed", attempt=2, reply_to="client-statuses")


def _to_the_last_try(started: dict[str, Any]) -> History:
    """Every try but the last failed, each on its timer: the next run schedules the last try."""
    h = History(OWED.instance_id, started, start=T0, name=names.DELIVER_STATUS)
    h.activity_failing(names.PUBLISH_STATUS, "SendError: send failed", FINAL_RETRY_DELAYS[:-1])
    h.timer_fired(h.now + FINAL_RETRY_DELAYS[-1])
    return h


def test_the_couriers_last_try_killed_every_time_is_repeated_then_logged_last_try_lost(
    functions: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    courier = functions[names.DELIVER_STATUS].func
    h = _to_the_last_try(OWED.courier_input())
    (last,) = h.run(courier).new_actions
    assert {k: json.loads(last["input"]).get(k) for k in ("lastTry", "answersGiveUp")} == {
        "lastTry": True,
        "answersGiveUp": True,
    }
    for wait in LAST_TRY_REPEATS:
        h.activity_failed(names.PUBLISH_STATUS, KILLED, at=h.now)
        (timer,) = h.run(courier).new_actions
        assert timer["type"] == "CreateTimer"
        h.timer_fired(h.now + wait)
    h.activity_failed(names.PUBLISH_STATUS, KILLED, at=h.now)
    with caplog.at_level(logging.INFO):
        ended = h.run(courier)
    assert ended.output == {"result": "GaveUp", "status": "Completed"}
    (lost,) = [r for r in caplog.records if getattr(r, "event", None) == "LastTryLost"]
    assert [lost.__dict__[k] for k in ("orderId", "status", "attempt", "instanceId")] == [
        "o1",
        "Completed",
        2,
        OWED.instance_id,
    ]


def test_the_couriers_last_try_answering_its_give_up_ends_it_and_one_started_before_ends_on_its_failure(
    functions: dict[str, Any],
) -> None:
    courier = functions[names.DELIVER_STATUS].func
    h = _to_the_last_try(OWED.courier_input())
    h.activity_completed(names.PUBLISH_STATUS, {"givenUp": True, "error": "send failed"}, at=h.now)
    assert h.run(courier).output == {"result": "GaveUp", "status": "Completed"}

    before = {k: v for k, v in OWED.courier_input().items() if k != "answersGiveUp"}
    h = _to_the_last_try(before)
    (last,) = h.run(courier).new_actions
    assert "answersGiveUp" not in json.loads(last["input"])
    h.activity_failed(names.PUBLISH_STATUS, KILLED, at=h.now)
    assert h.run(courier).output == {"result": "GaveUp", "status": "Completed"}
