"""The ops order detail's "statuses sent", read from an attempt's Durable history: ``publish_status``
calls, and the statuses the scheduler's first ``begin_step`` (``Processing``; ``load_order`` in a
``process_order_v2`` history) and ``mark_processed`` (``Completed``) sent themselves, as their recorded
answers say (``statusSent``)."""

from __future__ import annotations

import json
from typing import Any

from operations.instances import V2_LOAD_ORDER, in_time_order, statuses_sent
from orchestrators import names


def completed(name: str, data: dict[str, Any], result: Any, at: str) -> dict[str, Any]:
    """A TaskCompleted item as the Durable status API lists it with inputs and outputs."""
    return {
        "EventType": "TaskCompleted",
        "FunctionName": name,
        "Input": json.dumps(data),
        "Result": result,
        "Timestamp": at,
    }


def test_statuses_the_activities_sent_themselves_are_listed_and_failed_ones_are_not() -> None:
    fenced = {"orderId": "o1", "instanceId": "o1:2"}
    request = {"orderId": "o1", "instanceId": "o1:2", "step": "reserve-inventory", "attempt": 2}
    history = [
        {"EventType": "ExecutionStarted", "FunctionName": names.SCHEDULER, "Timestamp": "t0"},
        completed(
            names.BEGIN_STEP,
            {"request": request, "agent": "inventory", "announce": True},
            {"owned": True, "statusSent": True},
            "t1",
        ),
        completed(names.BEGIN_STEP, {"request": request, "agent": "payment"}, {"owned": True}, "t2"),
        completed(names.MARK_PROCESSED, {**fenced, "attempt": 2}, {"owned": True, "statusSent": False}, "t3"),
        completed(names.PUBLISH_STATUS, {"orderId": "o1", "status": "Completed", "attempt": 2}, None, "t4"),
    ]
    assert [(s["status"], s["attempt"], s["at"]) for s in statuses_sent("o1:2", history)] == [
        ("Processing", 2, "t1"),
        ("Completed", 2, "t4"),  # mark_processed's own try failed; the retry by publish_status went out
    ]


def test_an_announcement_not_made_is_not_listed() -> None:
    """An outage wait's attempt (no ``statusSent``), a fenced-out load, and an old answer without
    ``statusSent``: nothing was said."""
    fenced = {"orderId": "o1", "instanceId": "o1:3", "attempt": 3}
    history = [
        completed(V2_LOAD_ORDER, fenced, {"owned": True, "outageWait": True}, "t1"),
        completed(V2_LOAD_ORDER, fenced, {"owned": False}, "t2"),
        completed(names.MARK_PROCESSED, fenced, {"owned": True}, "t3"),
        completed(names.BEGIN_STEP, {"request": {**fenced, "step": "x"}, "agent": "a"}, {"owned": True}, "t4"),
        completed(
            names.BEGIN_STEP,
            {"request": {**fenced, "step": "x"}, "agent": "a", "announce": True},
            {"owned": True, "statusSent": False},
            "t5",
        ),
    ]
    assert statuses_sent("o1:3", history) == []


def test_a_process_order_v2_history_still_shows_the_processing_its_load_order_sent() -> None:
    fenced = {"orderId": "o1", "instanceId": "o1:2", "attempt": 2}
    history = [completed(V2_LOAD_ORDER, fenced, {"owned": True, "statusSent": True}, "t1")]
    assert [(s["status"], s["attempt"]) for s in statuses_sent("o1:2", history)] == [("Processing", 2)]


def test_a_status_whose_reply_queue_refused_the_app_is_not_listed_until_a_try_sent_it() -> None:
    """``publish_status`` answers ``StatusRefused`` when the submitter's queue refused this app; the orchestration
    tries again on its timers. Only the try that sent it is a status sent."""
    given = {"orderId": "o1", "status": "Completed", "attempt": 2, "replyTo": "q"}
    refused = json.dumps({"refused": True, "error": "'q' refuses this app"})
    history = [
        completed(names.PUBLISH_STATUS, given, refused, "t1"),
        completed(names.PUBLISH_STATUS, given, refused, "t2"),
        completed(names.PUBLISH_STATUS, given, None, "t3"),
    ]
    assert [(s["status"], s["at"]) for s in statuses_sent("o1:2", history)] == [("Completed", "t3")]


def test_a_status_whose_received_could_not_be_sent_first_is_not_listed() -> None:
    """``publish_status`` answers ``ReceivedUnsent`` when the ``Received`` the record still owed before the status
    failed (its timers count such tries apart): the status was not sent either."""
    given = {"orderId": "o1", "status": "Completed", "attempt": 2, "replyTo": "q", "receivedTriesLeft": 9}
    unsent = json.dumps({"unsent": "Received", "error": "send to 'q' failed: QuotaExceeded"})
    history = [
        completed(names.PUBLISH_STATUS, given, unsent, "t1"),
        completed(names.PUBLISH_STATUS, {**given, "receivedTriesLeft": 8}, None, "t2"),
    ]
    assert [(s["status"], s["at"]) for s in statuses_sent("o1:2", history)] == [("Completed", "t2")]


def test_statuses_are_listed_in_time_order_whatever_the_timestamps_fraction() -> None:
    """The extension drops a timestamp's trailing zeros (seven digits at most): ``:05Z`` is before
    ``:05.5Z`` and ``:05.12Z`` before ``:05.1234567Z``, which their texts sort the other way round."""
    sent: list[dict[str, Any]] = [
        {"status": "Completed", "at": "2026-12-05T05:00:05.5Z"},
        {"status": "Processing", "at": "2026-12-05T05:00:05Z"},
        {"status": "Failed", "at": "2026-12-05T05:00:06.1234567Z"},
        {"status": "Received", "at": "2026-12-05T05:00:06.12Z"},
        {"status": "Unknown", "at": None},
    ]
    assert [s["status"] for s in in_time_order(sent)] == ["Processing", "Completed", "Received", "Failed", "Unknown"]
