"""One agent request, handled in one invocation, ends within the 5 minutes the Functions host renews its
message's lock (host.json ``maxAutoLockRenewalDuration``, ``settings.LOCK_RENEWAL``) under any settings the app
starts with: against a service that times out on every call (``settings.REMOTE_CALL_TIMEOUT``), the calls and
backoffs stop at the request's deadline or at AGENT_MAX_ATTEMPTS, whichever comes first. Settings that would
let it run longer are refused at start (tests/test_settings_service_limits.py): past the renewal the lock
lapses and Service Bus delivers the request to a second handler while the first is still calling."""

from __future__ import annotations

import random

import pytest

from adapters.clock import ManualClock
from order_agents.circuit_gate import DependencyGate
from order_agents.runtime import run_agent_request
from settings import LOCK_RENEWAL, REMOTE_CALL_TIMEOUT, SEND_TIMEOUT, Settings
from tests.agents.support import START, ScriptedService, make_request, transient
from tests.fakes import HealthStoreWithoutMemory

# a long deadline with the default retries, and the most the start-up check lets through along each bound (the
# reply's send, up to SEND_TIMEOUT, comes after them in the same invocation)
ACCEPTED_EXTREMES = [
    {"STEP_TIMEOUT_SECONDS": "3600"},  # the default 4 calls and 3 backoffs
    {"STEP_TIMEOUT_SECONDS": "3600", "AGENT_MAX_ATTEMPTS": "15", "AGENT_RETRY_MAX_MS": "8000"},  # 262 s of them
    {"STEP_TIMEOUT_SECONDS": "260", "AGENT_MAX_ATTEMPTS": "1000"},  # the deadline and the call begun before it
]


@pytest.mark.parametrize("values", ACCEPTED_EXTREMES, ids=lambda v: ",".join(f"{k}={v[k]}" for k in v))
def test_a_request_against_a_service_that_always_times_out_ends_within_the_lock_renewal(values: dict[str, str]):
    clock = ManualClock(START)
    # circuits that never open: one request's own calls are the subject (an open circuit only ends it sooner)
    settings = Settings.from_env({}, CIRCUIT_FAILURE_THRESHOLD="1000000", **values)
    service = ScriptedService(clock, [transient("timed out")], latency_s=REMOTE_CALL_TIMEOUT.total_seconds())
    request = make_request(deadline=START + settings.step_timeout)
    gate = DependencyGate(HealthStoreWithoutMemory(), clock, settings.circuit_policy)
    run_agent_request(request, service, clock, settings, random.Random(3), gate)
    assert len(service.calls) > 1
    assert clock.now() - START + SEND_TIMEOUT <= LOCK_RENEWAL  # and the reply's send
