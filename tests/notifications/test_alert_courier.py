"""The alert courier (``deliver_alert_v1``, ``orchestrators/alert.py``): an operator alert whose send failed
where a trigger with a message in hand raised it (``notifications.alerts.raise_alert_or_owe``) is handed to it
(``hand_alerts_to_courier``) and sent under its own id on durable timers. The courier is replayed by the Durable
SDK's own engine over synthetic histories; the hand-over against the SDK's client and the local extension API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.servicebus.sender import SendError
from contracts.activities import SendAlertInput
from contracts.names import OPERATOR_ALERTS_QUEUE
from localrun.durable.engine import DurableEngine, instance_id_refusal
from notifications.alerts import (
    OwedAlert,
    build_alert,
    courier_instance_id,
    hand_alerts_to_courier,
    raise_alert_or_owe,
    send_owed_alert,
)
from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS
from tests.durable_history import History
from tests.fakes import RecordingSender
from tests.localrun.real_durable_client import RealDurableClient
from tests.notifications.courier_clients import Unreachable, courier_client

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def owed(order_id: str = "p1", discriminator: str | int = 42) -> OwedAlert:
    return OwedAlert(
        build_alert("OrderRejected", f"order {order_id} rejected", T0, order_id, "warning", discriminator, {})
    )


class FailingSender:
    def send(self, queue: str, message: Any) -> None:
        raise SendError(f"send to {queue!r} failed: ServiceCommunicationProblem")


def test_an_alert_whose_send_fails_is_owed_with_its_id_and_one_that_goes_out_is_not() -> None:
    sent = RecordingSender()
    assert raise_alert_or_owe(sent, kind="OrderRejected", summary="s", at=T0, order_id="p1", discriminator=7) is None
    assert sent.message_ids(OPERATOR_ALERTS_QUEUE) == ["alert:OrderRejected:p1:7"]
    item = raise_alert_or_owe(FailingSender(), kind="OrderRejected", summary="s", at=T0, order_id="p1", discriminator=7)
    assert item is not None and item.alert.alert_id == "alert:OrderRejected:p1:7"
    assert item.instance_id == "alert:OrderRejected:p1:7"
    # what the courier hands its activity: the alert as built, through the protocol and back
    assert SendAlertInput.from_json(json.loads(json.dumps(item.courier_input()))).alert == json.loads(
        item.alert.to_json()
    )


@pytest.mark.parametrize(
    "alert_id",
    [
        "alert:OrderRejected:p1:42",
        "alert:" + "K" * 200,  # bounded: its digest after ':'
        "alert:ReplyQueueUnavailable:-:bad#queue/name?x",  # characters no instance id may hold as they are
        build_alert("X" * 300, "s", T0, None, "error", "", {}).alert_id,  # a bounded alert id holds a '#'
    ],
)
def test_the_courier_instance_id_is_one_the_extension_takes_as_it_is(alert_id: str) -> None:
    instance = courier_instance_id(alert_id)
    assert len(instance) <= 100 and "#" not in instance
    assert instance_id_refusal(instance) is None
    assert all(c.isalnum() or c in "_:-" for c in instance)
    assert courier_instance_id(alert_id + "x") != instance  # two alerts never share a courier


def test_the_courier_sends_on_durable_timers_until_the_send_goes_through(functions: dict[str, Any]) -> None:
    """Replayed by the SDK: the first send fails, a timer of 5 s, the second fails, a timer of 30 s, the third is
    sent: the courier completes ``Sent``. Each call hands the activity the alert as it was given."""
    courier = functions[names.DELIVER_ALERT].func
    started = owed().courier_input()
    given = {"alert": started["alert"]}  # the instance's answersGiveUp is for its last try only
    h = History("alert:OrderRejected:p1:42", started, start=T0, name=names.DELIVER_ALERT)
    first = h.run(courier)
    assert [(a["functionName"], json.loads(a["input"])) for a in first.new_actions] == [(names.SEND_ALERT, given)]
    h.activity_failing(names.SEND_ALERT, "send to 'operator-alerts' failed", FINAL_RETRY_DELAYS[:1])
    waiting = h.run(courier)
    assert waiting.new_action_types() == ["CreateTimer"] and not waiting.is_done
    assert waiting.new_actions[0]["fireAt"].startswith((h.now + FINAL_RETRY_DELAYS[1]).strftime("%Y-%m-%dT%H:%M:%S"))
    h.timer_fired(h.now + FINAL_RETRY_DELAYS[1])
    h.activity_completed(names.SEND_ALERT, None, input=given, at=h.now)
    done = h.run(courier)
    assert done.is_done and done.output == {"result": "Sent", "alertId": "alert:OrderRejected:p1:42"}


def test_the_courier_gives_up_when_its_delays_are_used_up(functions: dict[str, Any]) -> None:
    """Every try fails, the last one answering its give-up (``AlertGivenUp``: it logged ``AlertUndelivered``): the
    courier ends ``GaveUp``. One started before (no ``answersGiveUp``) ends on its last try's failure, as recorded."""
    courier = functions[names.DELIVER_ALERT].func
    h = History("alert:OrderRejected:p1:42", owed().courier_input(), start=T0, name=names.DELIVER_ALERT)
    h.activity_failing(names.SEND_ALERT, "send failed", FINAL_RETRY_DELAYS[:-1])
    h.timer_fired(h.now + FINAL_RETRY_DELAYS[-1])
    h.activity_completed(names.SEND_ALERT, {"givenUp": True, "error": "send failed"}, at=h.now)
    result = h.run(courier)
    assert result.is_done and result.output == {"result": "GaveUp", "alertId": "alert:OrderRejected:p1:42"}
    before = {"alert": owed().courier_input()["alert"]}
    h = History("alert:OrderRejected:p1:42", before, start=T0, name=names.DELIVER_ALERT)
    h.activity_failing(names.SEND_ALERT, "send failed", FINAL_RETRY_DELAYS)
    result = h.run(courier)
    assert result.is_done and result.output == {"result": "GaveUp", "alertId": "alert:OrderRejected:p1:42"}


def test_only_the_couriers_last_try_says_it_is_the_last(functions: dict[str, Any]) -> None:
    """Replayed by the SDK: every try but the last hands the activity the alert as given; the last, after
    the last delay, says ``lastTry`` (its failure is logged ``AlertUndelivered``: nothing tries again)."""
    courier = functions[names.DELIVER_ALERT].func
    started = owed().courier_input()
    given = {"alert": started["alert"]}
    h = History("alert:OrderRejected:p1:42", started, start=T0, name=names.DELIVER_ALERT)
    assert [json.loads(a["input"]) for a in h.run(courier).new_actions] == [given]
    h.activity_failing(names.SEND_ALERT, "send failed", FINAL_RETRY_DELAYS[:-1])
    assert h.run(courier).new_action_types() == ["CreateTimer"]
    h.timer_fired(h.now + FINAL_RETRY_DELAYS[-1])
    last = h.run(courier)
    assert [(a["functionName"], json.loads(a["input"])) for a in last.new_actions] == [
        (names.SEND_ALERT, {**given, "lastTry": True, "answersGiveUp": True})
    ]
    assert SendAlertInput.from_json(json.loads(last.new_actions[0]["input"])).last_try is True


def test_a_failed_last_try_is_logged_alert_undelivered_and_an_earlier_one_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alert = {"alert": owed().courier_input()["alert"]}  # a try that does not ask to answer its give-up
    for extra, expected in (({}, []), ({"lastTry": True}, ["AlertUndelivered"])):
        caplog.clear()
        with caplog.at_level("INFO"), pytest.raises(SendError):
            send_owed_alert(FailingSender(), SendAlertInput.from_json({**alert, **extra}))
        assert [getattr(r, "event", None) for r in caplog.records if r.levelname == "ERROR"] == expected
    sent = RecordingSender()
    send_owed_alert(sent, SendAlertInput.from_json({**alert, "lastTry": True}))  # a last try that goes through
    assert sent.message_ids(OPERATOR_ALERTS_QUEUE) == ["alert:OrderRejected:p1:42"]


@pytest.fixture
def client() -> Iterator[tuple[DurableEngine, RealDurableClient]]:
    with courier_client(names.DELIVER_ALERT) as pair:
        yield pair


def test_a_second_hand_over_of_the_same_alert_finds_its_courier_running(client: Any) -> None:
    """The SDK's ``start_new`` raises for an instance that exists and runs (409): that courier is delivering the
    alert, so the hand-over is done; a long alert id is started under its bounded instance id."""
    engine, real = client
    long = owed("o" * 64, "9" * 60)
    real.run(hand_alerts_to_courier(real.client, [long]))
    real.run(hand_alerts_to_courier(real.client, [long]))  # a redelivery's: no error
    [instance] = engine.instances()
    assert instance.instance_id == long.instance_id and instance.status is OrchestrationRuntimeStatus.Pending


def test_a_hand_over_durable_does_not_take_is_returned_for_its_message_to_be_handled_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An alert handling its message again raises again: returned (the trigger has the message handled again later,
    ``submission.courier_retry``), logged ``AlertNotHandedOver`` (WARNING), never raised into the trigger (before:
    ``AlertHandOverFailed``, the message redelivered at once until an outage dead-lettered it). One nothing raises
    again (``raised_again`` False) is sent once more through the sender instead, not returned."""
    import asyncio

    caplog.set_level("INFO")
    again, gone = owed(), replace(owed("p2"), raised_again=False)
    sent = RecordingSender()
    assert asyncio.run(hand_alerts_to_courier(Unreachable(), [again, gone], sent)) == (again,)
    [event] = [r for r in caplog.records if getattr(r, "event", None) == "AlertNotHandedOver"]
    assert event.levelname == "WARNING" and getattr(event, "alertId", None) == "alert:OrderRejected:p1:42"
    assert sent.message_ids(OPERATOR_ALERTS_QUEUE) == ["alert:OrderRejected:p2:42"]
