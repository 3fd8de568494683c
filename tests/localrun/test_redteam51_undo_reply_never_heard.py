"""Red team (s51): a refund made whose reply the payment agent could not send, and the ``CompensationFailed`` alert.

The agent refunds (the undo key), its reply's sends fail until the undo's deadline, the round's timer wins, and the
rounds run out: ``CompensationFailed`` "did not finish in 3 rounds; last: deadline missed", the refund made at the
provider. The alert the supervisor sent for it had no next step; the one a round sends when an undo's tries failed
transiently (a timeout while the provider went on, an agent dead after its call) said "undo the named entry by hand",
as docs/compensation.md did. An operator who did refunded the customer twice. Now both say the undo may have been
done (``undoOutcomeUnknown``): ask the provider first, or compensate again, which asks under the same undo key."""

from __future__ import annotations

import json

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE
from domain.compensation import OUTCOME_UNKNOWN_WARNING
from localrun.profile import Profile
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.cosmos

REPLIES_NEVER_SENT = {"agents": {"payment": {"reply_send_failure_rate": 1.0}}, "orders": {"cancel_rate": 0.5}}


def test_a_compensation_failed_over_a_refund_made_warns_before_a_refund_by_hand() -> None:
    result = run_simulation(SimulationConfig(orders=12, seed=3, profile=Profile.parse(REPLIES_NEVER_SENT)))
    alerts = [json.loads(str(m)) for m in result.broker.contents(OPERATOR_ALERTS_QUEUE)]
    failed = [a for a in alerts if a.get("kind") == "CompensationFailed"]
    refunded = [a for a in failed if result.ledger.effects(a["orderId"], "refund")]
    assert refunded, [a.get("kind") for a in alerts]  # the case: the refund made, its answer never heard
    for alert in refunded:
        details = alert["details"]
        assert details.get("undoOutcomeUnknown") is True, details
        assert OUTCOME_UNKNOWN_WARNING in details.get("nextStep", ""), details
