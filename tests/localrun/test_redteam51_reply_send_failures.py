"""Red team (s51): agents whose reply sends fail (``agents.<agent>.reply_send_failure_rate``: the send raises
``SendError`` after the SDK's retries, the remote work done). The request was abandoned for redelivery at each
failure, and five quick redeliveries ended in ``MaxDeliveryCountExceeded``: a dead letter, so a page
(``deadLettersFound``), and a supervisor retry counted against the order, for an order that recovered on its own.
Now the agent sends the reply again within its delivery while the deadline is ahead
(``order_agents/service_bus_agent.py``; ``tests/agents/test_redteam51_reply_unsendable.py``)."""

from __future__ import annotations

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.cosmos

REPLIES_FAILING = {
    "agents": {"payment": {"reply_send_failure_rate": 0.7}, "shipping": {"reply_send_failure_rate": 0.5}},
}


def test_replies_that_fail_to_send_are_sent_again_without_dead_letters_or_retries() -> None:
    report = build_report(run_simulation(SimulationConfig(orders=30, seed=51, profile=Profile.parse(REPLIES_FAILING))))
    assert report["injected_faults"]["reply_sends_failed"] > 50
    assert [d for d in report["dead_letters"] if d["reason"] == "MaxDeliveryCountExceeded"] == []
    assert report["recoveries"]["supervisor_retries"] == 0
    assert report["final_states"]["Processed"] == 30, report["final_states"]
    assert {k: v for k, v in report["invariants"].items() if v} == {}, report["invariant_examples"]
