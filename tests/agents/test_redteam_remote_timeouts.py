"""The simulators honour the client's timeout as HTTP does: the agents' HTTP client
(``adapters.remote.http_service``: ``urllib``, the answer read within ``REMOTE_CALL_TIMEOUT``) gives up after
10 s without an answer and the call fails transiently, while the provider goes on with it and commits
(or refuses) it when its work is done. Before, a simulated call held its agent for its whole latency (up to
240 s in ``slow-remote-calls``) and answered it: no retry, redelivery or undo ever met a call still running at
the service, the overlap a real provider sees."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.remote.interface import RemoteCall, RemoteError
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import NetEffect
from adapters.remote.simulators.service import SimulatedService
from settings import REMOTE_CALL_TIMEOUT
from tests.agents.support import START

SLOW = SimulatorConfig(latency_ms=(90_000, 90_000))
FAST = SimulatorConfig(latency_ms=(1_000, 1_000))


def charge(token: int = 1) -> RemoteCall:
    return RemoteCall("payment", "charge", "o1", "o1:charge-payment", token, {"amountCents": 500, "currency": "EUR"})


def test_a_call_slower_than_the_client_timeout_times_out_and_the_service_commits_it_later():
    clock = ManualClock(START)
    payment = SimulatedService("payment", clock, SLOW)
    with pytest.raises(RemoteError, match="timed out") as timed_out:
        payment.call(charge())
    assert (timed_out.value.transient, timed_out.value.timed_out, timed_out.value.in_progress) == (True, True, False)
    assert clock.now() - START == REMOTE_CALL_TIMEOUT
    assert payment.ledger.effects("o1") == []  # still working on it

    clock.set(START + timedelta(seconds=95))
    payment.config = FAST
    answer = payment.call(charge())  # the same key, after the first call committed: its result, no second charge
    assert answer["amountCents"] == 500
    assert [(e.reference, e.at - START) for e in payment.ledger.effects("o1")] == [
        (answer["chargeId"], timedelta(seconds=90))
    ]


def test_a_retry_while_the_first_call_still_runs_is_transient_never_a_second_charge_or_a_refusal():
    clock = ManualClock(START)
    payment = SimulatedService("payment", clock, SLOW)
    with pytest.raises(RemoteError, match="timed out"):
        payment.call(charge())
    payment.config = FAST
    with pytest.raises(RemoteError, match="still working") as busy:
        payment.call(charge())
    assert (busy.value.transient, busy.value.timed_out, busy.value.in_progress) == (True, False, True)
    clock.set(START + timedelta(seconds=90))
    assert payment.call(charge())["amountCents"] == 500
    assert payment.ledger.net("o1") == NetEffect(charged_cents=500)


def test_a_late_commit_of_an_older_attempt_is_refused_once_a_newer_token_reached_the_service():
    clock = ManualClock(START)
    payment = SimulatedService("payment", clock, SLOW)
    with pytest.raises(RemoteError, match="timed out"):
        payment.call(charge(token=1))
    payment.config = FAST
    clock.set(START + timedelta(seconds=30))
    with pytest.raises(RemoteError, match="still working"):
        payment.call(charge(token=2))  # the next attempt meets the first one's call still running
    clock.set(START + timedelta(seconds=91))
    answer = payment.call(charge(token=2))  # attempt 1's call was refused at its commit: the newer attempt charges
    assert [e.reference for e in payment.ledger.effects("o1")] == [answer["chargeId"]]
    assert payment.ledger.net("o1") == NetEffect(charged_cents=500)


class _Killed(Exception):
    """The agent's host died while the call waited for its answer."""


class _DyingClock(ManualClock):
    def sleep(self, seconds: float) -> None:
        raise _Killed


def test_a_call_whose_caller_died_waiting_still_takes_effect():
    clock = _DyingClock(START)
    payment = SimulatedService("payment", clock, FAST)
    with pytest.raises(_Killed):
        payment.call(charge())
    clock.set(START + timedelta(seconds=5))
    payment.finish()
    assert payment.ledger.net("o1") == NetEffect(charged_cents=500)


def test_a_call_within_the_timeout_is_answered_as_before():
    clock = ManualClock(START)
    payment = SimulatedService("payment", clock, SimulatorConfig(latency_ms=(9_000, 9_000)))
    assert payment.call(charge())["amountCents"] == 500
    assert clock.now() - START == timedelta(seconds=9)
    assert payment.abandoned == []
