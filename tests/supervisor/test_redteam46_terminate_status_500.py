"""The supervisor's best-effort termination while the Durable extension answers a status read with 500 (its storage
failing): the SDK reads the error object as an empty status, as for an unknown instance, and the supervisor logged
the instance as unknown, nothing to terminate (``SupervisorTerminateSkipped``). It cannot tell: now a failed
termination (``SupervisorTerminateFailed``, harmless: the attempt's writes are fenced). Through the real client."""

from __future__ import annotations

import logging

import pytest

from localrun.durable.extension_api.handlers import json_answer
from orchestrators.names import SCHEDULER
from supervisor.terminate import terminate_expired
from tests.notifications.courier_clients import courier_client

ERROR = {"Message": "Something went wrong while processing your request", "ExceptionMessage": "storage timeout"}


def _events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [str(getattr(r, "event", "")) for r in caplog.records if getattr(r, "event", None)]


def test_a_status_read_answered_500_is_a_failed_termination_not_an_unknown_instance(caplog) -> None:
    caplog.set_level(logging.INFO)
    with courier_client(SCHEDULER) as (_engine, real):
        real.api.before_answer = lambda method, path: json_answer(500, ERROR) if method == "GET" else None
        terminated = real.run(terminate_expired(real.client, ["o-1:2"]))

    assert terminated == []
    assert _events(caplog) == ["SupervisorTerminateFailed"], _events(caplog)


def test_an_unknown_instance_is_still_skipped(caplog) -> None:
    caplog.set_level(logging.INFO)
    with courier_client(SCHEDULER) as (_engine, real):
        terminated = real.run(terminate_expired(real.client, ["o-1:2"]))

    assert terminated == []
    assert _events(caplog) == ["SupervisorTerminateSkipped"], _events(caplog)
