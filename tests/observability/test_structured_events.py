"""Every state transition, recovery and alert is a structured event: the fields the alert rules in
infra/modules/alerts.bicep and the dashboards query (``event``, ``toState``, ``orderId``) are there."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import timedelta

import pytest

from supervisor.run import run_supervisor
from supervisor.scan import ScanState
from tests.fakes import FakeReceivedMessage, RecordingActions, RecordingClient
from tests.submission.corpus import order

pytestmark = pytest.mark.cosmos


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_submission_and_claim_log_one_transition_each_with_from_and_to(functions, app_context, caplog):
    fn = functions["submit_order"].func.client_function
    with caplog.at_level(logging.INFO):
        asyncio.run(
            fn(message=FakeReceivedMessage.of(order()), message_actions=RecordingActions(), client=RecordingClient())
        )
    moves = [(r.fromState, r.toState, r.transition) for r in events(caplog, "StateTransition")]  # type: ignore[attr-defined]
    assert moves == [("(new)", "Pending", "Received"), ("Pending", "Processing", "Claimed")]
    assert {r.orderId for r in events(caplog, "StateTransition")} == {"ord-1"}  # type: ignore[attr-defined]


def test_an_escalation_logs_the_transition_the_recovery_and_the_alert(app_context, clock, caplog):
    from domain import transitions

    record = transitions.claim(transitions.new_record("o1", None, clock.now()), clock.now(), timedelta(0))
    app_context.states.create(replace(record, failure_count=2))
    clock.advance(timedelta(seconds=1))
    with caplog.at_level(logging.INFO):
        run_supervisor(app_context, ScanState())
    # the escalation, then the acknowledgement that its alert and status were delivered (supervisor/owed.py)
    moves = [(m.fromState, m.toState, m.transition) for m in events(caplog, "StateTransition")]  # type: ignore[attr-defined]
    assert moves == [("Processing", "Error", "Escalated"), ("Error", "Error", "NotificationsDelivered")]
    assert events(caplog, "SupervisorEscalated")
    [alert] = events(caplog, "OperatorAlert")
    assert alert.levelno == logging.ERROR and alert.orderId == "o1"  # type: ignore[attr-defined]
