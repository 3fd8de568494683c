"""A submitter whose every send fails gives its message up (``localrun.simulation._submit``).

Red team (extreme faults): ``servicebus.send_failure_rate`` 1.0 ended ``simulate`` with a ``RuntimeError`` traceback
("could not submit ord-00001 after 50 tries") before any order ran, and so did rates from about 0.9 on once one of a
run's messages met 50 failures in a row (0.9**50 per message)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from adapters.clock import ManualClock
from adapters.servicebus.sender import OutgoingMessage
from contracts.names import ORDERS_QUEUE
from localrun.servicebus import InProcessBroker, SendFaults
from localrun.simulation import SUBMIT_TRIES, Submitted, _submit

ROOT = Path(__file__).resolve().parents[2]


def _broker(faults: SendFaults | None) -> InProcessBroker:
    broker = InProcessBroker(ManualClock(datetime(2026, 1, 1, tzinfo=UTC)), send_faults=faults)
    broker.declare_queue(ORDERS_QUEUE)
    return broker


def test_every_send_failing_gives_the_message_up_and_stores_nothing() -> None:
    broker = _broker(SendFaults(1.0, random.Random(1)))
    assert _submit(broker, OutgoingMessage(body="{}", message_id="ord-1")) is Submitted.GAVE_UP
    assert broker.counters(ORDERS_QUEUE).send_failures == SUBMIT_TRIES
    assert broker.peek(ORDERS_QUEUE, 10) == []


def test_a_message_one_failed_try_stored_is_sent_whatever_the_client_heard() -> None:
    # every try fails, the first after the broker stored it (a lost ack): the app has it, as any message sent
    broker = _broker(SendFaults(1.0, random.Random(1), stored_anyway_rate=1.0))
    assert _submit(broker, OutgoingMessage(body="{}", message_id="ord-1")) is Submitted.SENT
    assert [m.message_id for m in broker.peek(ORDERS_QUEUE, 10)] == ["ord-1"]


def test_a_message_a_first_send_took_is_preempted_and_one_sent_is_sent() -> None:
    broker = _broker(None)
    assert _submit(broker, OutgoingMessage(body="{}", message_id="ord-1")) is Submitted.SENT
    assert _submit(broker, OutgoingMessage(body="{}", message_id="ord-1")) is Submitted.PREEMPTED


def test_a_run_whose_every_send_fails_ends_with_its_orders_given_up_not_lost(tmp_path: Path) -> None:
    profile = tmp_path / "p.json"
    profile.write_text('{"servicebus": {"send_failure_rate": 1.0}}')
    report = tmp_path / "r.json"
    run = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--orders", "3", "--seed", "1", "--no-progress",
         "--faults", str(profile), "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    result = json.loads(report.read_text())
    assert result["given_up_messages"] == ["ord-00001", "ord-00002", "ord-00003"]
    assert all(count == 0 for count in result["invariants"].values()), result["invariants"]
