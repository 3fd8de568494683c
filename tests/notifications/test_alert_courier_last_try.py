"""The alert courier's last try dying before its code runs (``orchestrators/alert.py``).

Before: the courier's last ``send_alert`` try (``lastTry``) logs ``AlertUndelivered`` when its send fails, then
raises; a last try that failed without running that code (its worker killed at host.json's ``functionTimeout``, a
worker crash the extension reports as the activity's failure) ended the courier ``GaveUp`` with nothing logged: the
alert lost, no page. Now a courier started with ``answersGiveUp`` (``OwedAlert.courier_input``) asks its last try to
answer its give-up (``AlertGivenUp``), repeats a last try that fails (``LAST_TRY_REPEATS``), and logs
``LastTryLost`` itself (once, not on replay) when every repeat failed too. Replayed by the Durable SDK; each try
that is not killed runs the real ``send_alert`` activity code (``notifications.alerts.send_owed_alert``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.servicebus.sender import MessageSender, OutgoingMessage, SendError
from contracts.activities import SendAlertInput
from contracts.names import OPERATOR_ALERTS_QUEUE
from notifications.alerts import OwedAlert, build_alert, send_owed_alert
from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS, LAST_TRY_REPEATS
from tests.durable_history import History
from tests.fakes import RecordingSender

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
INSTANCE = "alert:OrderRejected:p1:42"
KILLED = "Timeout value of 00:30:00 was exceeded by function: Functions.send_alert"
TRIES = len(FINAL_RETRY_DELAYS) + 1


class FailingFirst(RecordingSender):
    """operator-alerts failing its first ``failures`` sends, then taking them."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise SendError(f"send to {queue!r} failed: ServiceCommunicationProblem")
        super().send(queue, message)


def courier_input(*, answers_give_up: bool = True) -> dict[str, Any]:
    owed = OwedAlert(build_alert("OrderRejected", "order p1 rejected", T0, "p1", "warning", 42, {}))
    given = owed.courier_input()
    if not answers_give_up:  # a courier started before the change
        given.pop("answersGiveUp")
    return given


def deliver(
    courier: Callable[..., Any], given: dict[str, Any], sender: MessageSender, killed: Callable[[int], bool]
) -> tuple[History, Any, list[dict[str, Any]]]:
    """Plays the courier to its end: each try (numbered from 1) either killed (``killed``: failed with the host's
    timeout, its code never run) or run with ``send_owed_alert``. The history, the output and each try's input."""
    h = History(INSTANCE, given, start=T0, name=names.DELIVER_ALERT)
    inputs: list[dict[str, Any]] = []

    def send_alert(name: str, data: dict[str, Any]) -> Any:
        assert name == names.SEND_ALERT
        inputs.append(data)
        if killed(len(inputs)):
            raise RuntimeError(KILLED)
        answer = send_owed_alert(sender, SendAlertInput.from_json(data))
        return None if answer is None else answer.to_json()

    return h, h.play(courier, send_alert), inputs


def events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "event", "") for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_killed_last_try_is_repeated_and_the_repeat_sends_the_alert(
    functions: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The queue refuses the first nine tries; the tenth, the last, is killed before its code runs. The courier waits
    ``LAST_TRY_REPEATS[0]`` and tries the last try again, which sends it: ``Sent``, nothing logged lost."""
    sender = FailingFirst(TRIES - 1)
    with caplog.at_level(logging.INFO):
        _, output, inputs = deliver(functions[names.DELIVER_ALERT].func, courier_input(), sender, lambda n: n == TRIES)

    assert output == {"result": "Sent", "alertId": INSTANCE}
    assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == [INSTANCE]
    assert len(inputs) == TRIES + 1
    assert [i.get("lastTry") for i in inputs] == [None] * (TRIES - 1) + [True, True]
    assert [i.get("answersGiveUp") for i in inputs] == [None] * (TRIES - 1) + [True, True]  # only the last asks
    assert events(caplog) == []


def test_every_repeat_of_a_killed_last_try_killed_too_is_logged_last_try_lost_once(
    functions: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The last try and each of its repeats killed: ``GaveUp``, logged ``LastTryLost`` (ERROR, the event the
    alertsUndelivered rule pages on) with the alert's kind, order and the instance; not again when the instance's
    history is replayed."""
    courier = functions[names.DELIVER_ALERT].func
    sender = FailingFirst(1_000)
    with caplog.at_level(logging.INFO):
        h, output, inputs = deliver(courier, courier_input(), sender, lambda n: n >= TRIES)

    assert output == {"result": "GaveUp", "alertId": INSTANCE}
    assert len(inputs) == TRIES + len(LAST_TRY_REPEATS)
    (lost,) = [r for r in caplog.records if getattr(r, "event", None) == "LastTryLost"]
    assert lost.levelno == logging.ERROR
    fields = {k: getattr(lost, k) for k in ("instanceId", "orderId", "alertKind", "alertId", "activity", "tries")}
    assert fields == {
        "instanceId": INSTANCE,
        "orderId": "p1",
        "alertKind": "OrderRejected",
        "alertId": INSTANCE,
        "activity": names.SEND_ALERT,
        "tries": 1 + len(LAST_TRY_REPEATS),
    }
    assert events(caplog) == ["LastTryLost"]  # no AlertUndelivered: the give-up never ran

    caplog.clear()
    h.new_episode(h.now + timedelta(seconds=1))  # the same history, every event played: a replay
    with caplog.at_level(logging.INFO):
        assert h.run(courier).output == output
    assert events(caplog) == []


def test_a_last_try_that_gave_up_answers_so_and_is_not_repeated(
    functions: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The last try runs and its send fails: logged ``AlertUndelivered`` once by the activity, answered
    ``AlertGivenUp``; the courier ends ``GaveUp`` with no repeat and nothing more logged."""
    sender = FailingFirst(1_000)
    with caplog.at_level(logging.INFO):
        _, output, inputs = deliver(functions[names.DELIVER_ALERT].func, courier_input(), sender, lambda n: False)

    assert output == {"result": "GaveUp", "alertId": INSTANCE}
    assert len(inputs) == TRIES
    assert events(caplog) == ["AlertUndelivered"]


def test_a_courier_started_before_ends_at_its_last_try_as_recorded(functions: dict[str, Any]) -> None:
    """A courier whose input lacks ``answersGiveUp`` (started before the change) replays as its history holds: its
    last try does not ask to answer, and any failure of it ends the courier (the defect kept for its life)."""
    sender = FailingFirst(1_000)
    _, output, inputs = deliver(
        functions[names.DELIVER_ALERT].func, courier_input(answers_give_up=False), sender, lambda n: n == TRIES
    )

    assert output == {"result": "GaveUp", "alertId": INSTANCE}
    assert len(inputs) == TRIES and "answersGiveUp" not in inputs[-1]


def test_the_activity_answers_its_give_up_only_when_its_try_asks() -> None:
    """A last try that asks (``answersGiveUp``) answers ``AlertGivenUp`` once logged; one that does not (scheduled by
    a courier started before, or by an older release after a rollback) raises after logging, as before."""
    data = SendAlertInput.from_json({**courier_input(answers_give_up=False), "lastTry": True})
    with pytest.raises(SendError):
        send_owed_alert(FailingFirst(1), data)
    answer = send_owed_alert(FailingFirst(1), SendAlertInput.from_json({**data.to_json(), "answersGiveUp": True}))
    assert answer is not None and answer.to_json()["givenUp"] is True
