"""A status read the Durable extension answered 500 without its error object must not read as "no such instance".

The SDK's ``get_status`` takes a 200, 202, 400, 404 and 500 alike and reads the body as a status, dropping the code.
``read_status`` told a 500 from a 404 by the fields of the extension's error object (``Message``,
``ExceptionMessage``) alone, so a 500 with an empty body (``null`` too), or a 400 without one, read as an empty,
falsy status: an instance the backend does not know (``ABSENT``). The supervisor then released a claim whose start
failed as a missed start, on the very outage its backend wait is for; a terminate logged the instance "unknown"; the
ops API refused a review answer as to an attempt that is not running. A body that is no JSON (a host's text or HTML
error page) made the SDK raise ``JSONDecodeError``, not ``StatusUnreadable``. Now the code is read too
(``adapters.durable_client.answer_codes``): only a 404 is absent. The answers come from the runner's HTTP edge
(``DurableExtensionApi.before_answer``), below the SDK's real client: what the extension answers is
``HttpApiHandler`` (a 404 with no content for an unknown instance; a 500 with its error object for an exception)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from azure.functions.timer import TimerRequest

import dependencies
import supervisor.blueprint
from adapters.durable_client import answer_codes, bounded_client
from domain.states import ProcessState
from localrun.durable.extension_api.handlers import Answer, empty, json_answer
from orchestrators.raise_events import StatusUnreadable, read_status
from supervisor.backend_wait import ABSENT, UNREAD, read_statuses
from supervisor.scan import ScanState
from supervisor.terminate import terminate_expired
from tests.notifications.courier_clients import courier_client
from tests.supervisor.conftest import expired

ORCHESTRATOR = "process_order_v3"
ERROR_OBJECT = json_answer(500, {"Message": "Something went wrong", "ExceptionMessage": "storage timeout"})
# Answers with no status and no error object: what a host, a proxy or a crash in front of the extension answers.
WITHOUT_ERROR_OBJECT = {
    "an empty 500": empty(500),
    "a 500 of JSON null": Answer(500, b"null", {"Content-Type": "application/json"}),
    "an empty 400": empty(400),
}
NOT_JSON = {
    "an HTML 500": Answer(
        500, b"<html><body>500 - Internal server error.</body></html>", {"Content-Type": "text/html"}
    ),
    "a text 500": Answer(500, b"Internal Server Error", {"Content-Type": "text/plain"}),
}


def _status_reads_answer(real: Any, answer: Answer, only: str | None = None) -> None:
    """Every status read (of the instance ``only`` when given) answered ``answer``; other calls carried out."""

    def fail(method: str, path: str) -> Answer | None:
        if method == "GET" and "/instances/" in path and (only is None or only in path):
            return answer
        return None

    real.api.before_answer = fail


@pytest.mark.parametrize("answer", WITHOUT_ERROR_OBJECT.values(), ids=WITHOUT_ERROR_OBJECT.keys())
def test_an_error_without_the_error_object_is_unreadable_not_absent(answer: Answer, caplog: Any) -> None:
    """Unread, it is logged ``SupervisorStatusUnread``, one of the events the ``durableBackendFailing`` rule counts;
    read ``ABSENT`` it was no failure at all."""
    with courier_client(ORCHESTRATOR) as (_engine, real):
        real.run(real.client.start_new(ORCHESTRATOR, "o1:1", {}))
        _status_reads_answer(real, answer)
        with pytest.raises(StatusUnreadable, match=rf"o1:1 with an error \(HTTP {answer.status}\)"):
            real.run(read_status(real.client, "o1:1"))
        assert real.run(read_statuses(real.client, ["o1:1", "o2:1"])) == {"o1:1": UNREAD, "o2:1": UNREAD}
        # the supervisor's client is the SDK's wrapped in BoundedClient: the code is read through it the same
        assert real.run(read_statuses(bounded_client(real.client), ["o1:1"])) == {"o1:1": UNREAD}
    assert [
        getattr(r, "unread", None) for r in caplog.records if getattr(r, "event", None) == "SupervisorStatusUnread"
    ] == [2, 1]


# JSON the SDK's ``DurableOrchestrationStatus.from_json`` cannot read: it raises ``TypeError`` (found by the red team).
NOT_A_STATUS = {
    "a 500 of a JSON list": Answer(500, b"[]", {"Content-Type": "application/json"}),
    "a 500 of a JSON number": Answer(500, b"42", {"Content-Type": "application/json"}),
    "a 200 whose createdTime is a number": Answer(200, b'{"createdTime": 5}', {"Content-Type": "application/json"}),
}
NO_STATUS = [(a, "JSONDecodeError") for a in NOT_JSON.values()] + [(a, "TypeError") for a in NOT_A_STATUS.values()]


@pytest.mark.parametrize(("answer", "raised"), NO_STATUS, ids=[*NOT_JSON, *NOT_A_STATUS])
def test_an_answer_that_is_no_json_or_no_status_is_unreadable(answer: Answer, raised: str) -> None:
    with courier_client(ORCHESTRATOR) as (_engine, real):
        _status_reads_answer(real, answer)
        with pytest.raises(StatusUnreadable, match=rf"o1:1 with no status.*{raised}"):
            real.run(read_status(real.client, "o1:1"))
        assert real.run(read_statuses(real.client, ["o1:1"])) == {"o1:1": UNREAD}


def test_the_error_object_is_unreadable_and_a_404_absent_as_before() -> None:
    with courier_client(ORCHESTRATOR) as (_engine, real):
        real.run(real.client.start_new(ORCHESTRATOR, "o1:1", {}))
        status = real.run(read_status(real.client, "o2:1"))  # the extension's own 404: no content
        assert not status
        assert real.run(read_statuses(bounded_client(real.client), ["o1:1", "o2:1"])) == {
            "o1:1": "Pending",
            "o2:1": ABSENT,
        }
        _status_reads_answer(real, empty(404), only="o1")  # a 404 answered for an instance that exists: absent too
        assert real.run(read_statuses(real.client, ["o1:1"])) == {"o1:1": ABSENT}
        _status_reads_answer(real, ERROR_OBJECT)
        with pytest.raises(StatusUnreadable, match="storage timeout"):
            real.run(read_status(real.client, "o2:1"))


def test_a_500_that_carries_a_status_is_that_status() -> None:
    """The extension answers a ``Failed`` instance's status with a 500 when asked to
    (``returnInternalServerErrorOnFailure``), and an unknown runtime state so: the status it carries is read."""
    failed = {
        "name": ORCHESTRATOR,
        "instanceId": "o1:1",
        "runtimeStatus": "Failed",
        "createdTime": "2026-01-01T00:00:00Z",
        "lastUpdatedTime": "2026-01-01T00:01:00Z",
    }
    with courier_client(ORCHESTRATOR) as (_engine, real):
        _status_reads_answer(real, json_answer(500, failed))
        status = real.run(read_status(real.client, "o1:1"))
        assert status and status.runtime_status.value == "Failed"
        assert real.run(read_statuses(real.client, ["o1:1"])) == {"o1:1": "Failed"}


def test_reads_in_flight_together_each_get_their_own_code() -> None:
    """The codes are noted per task (``read_statuses`` reads eight at once): instances unknown to the backend read
    beside one answered an empty 500 are still absent, and that one unread."""
    with courier_client(ORCHESTRATOR) as (_engine, real):
        real.run(real.client.start_new(ORCHESTRATOR, "live:1", {}))
        _status_reads_answer(real, empty(500), only="failing")
        unknown = [f"gone{n}:1" for n in range(20)]
        statuses = real.run(read_statuses(real.client, ["failing:1", "live:1", *unknown]))
        assert statuses == {"failing:1": UNREAD, "live:1": "Pending", **dict.fromkeys(unknown, ABSENT)}


def test_the_codes_are_read_from_the_pinned_sdk() -> None:
    """``answer_codes`` relies on the SDK's ``_get_async_request`` (azure-functions-durable 1.7.0, requirements.txt):
    a read of the real client notes the extension's code, and nothing outside the block."""
    with courier_client(ORCHESTRATOR) as (_engine, real):
        real.run(real.client.start_new(ORCHESTRATOR, "o1:1", {}))

        async def read(instance: str) -> list[int]:
            with answer_codes(real.client) as codes:
                await real.client.get_status(instance)
            await real.client.get_status(instance)  # outside: not noted
            return codes

        assert real.run(read("o1:1")) == [202]
        assert real.run(read("o2:1")) == [404]


# --- what the callers do with it ----------------------------------------------------------------------------------


def _trigger(functions: Any) -> Any:
    user = functions["supervisor"].func
    return getattr(user, "client_function", None) or user.__wrapped__


@pytest.mark.cosmos
def test_the_timer_leaves_a_claim_whose_status_read_answered_an_empty_500(
    make_ctx, functions, states, clock, monkeypatch
) -> None:
    """A claim whose start failed, read while the host answers an empty 500: left to a later run, unwritten and
    uncounted (``UNREAD``), not released as a start the backend never had (``ABSENT``); once the extension answers,
    404, it is."""
    dependencies.use_context(make_ctx())
    monkeypatch.setattr(supervisor.blueprint, "SCAN_STATE", ScanState())
    try:
        before = expired(states, "o1", clock, timedelta(seconds=5))
        with courier_client(ORCHESTRATOR) as (_engine, real):
            trigger = _trigger(functions)
            real.api.before_answer = lambda method, path: empty(500)
            real.run(trigger(timer=TimerRequest(past_due=False), client=real.client))
            record = states.get("o1")
            assert record is not None and record.version == before.version  # not written, not counted
            assert (record.process_state, record.locked_by, record.starts_missed) == (
                ProcessState.PROCESSING,
                "o1:1",
                0,
            )

            real.api.before_answer = lambda method, path: None  # the outage is over
            real.run(trigger(timer=TimerRequest(past_due=False), client=real.client))
    finally:
        dependencies.use_context(None)
    record = states.get("o1")
    assert record is not None and record.process_state is ProcessState.PENDING
    assert (record.failure_count, record.starts_missed) == (0, 1)


def test_a_terminate_whose_status_read_answered_an_empty_500_says_it_failed(caplog) -> None:
    """Not "unknown: nothing to terminate": the instance may be live (its writes are fenced all the same)."""
    caplog.set_level(logging.INFO)
    with courier_client(ORCHESTRATOR) as (_engine, real):
        real.run(real.client.start_new(ORCHESTRATOR, "o1:1", {}))
        _status_reads_answer(real, empty(500))
        assert real.run(terminate_expired(bounded_client(real.client), ["o1:1"])) == []
    events = [getattr(r, "event", None) for r in caplog.records]
    assert "SupervisorTerminateFailed" in events and "SupervisorTerminateSkipped" not in events
