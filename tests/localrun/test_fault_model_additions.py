"""The fault kinds of issue 11 (part A) in the runner: slow-call tails and lost Cosmos responses in
the profile, and the per-host clocks."""

from __future__ import annotations

import functools
import random
from datetime import timedelta
from pathlib import Path

import pytest

from localrun.audit import Audit, CosmosFaults
from localrun.clocks import SkewedClocks, host_of
from localrun.profile import Profile, ProfileError
from localrun.virtual_time import TaskScheduler


def test_the_new_profile_keys_parse_and_typos_are_refused():
    profile = Profile.parse(
        {
            "remote": {"payment": {"slow_call_rate": 0.2, "slow_latency_ms": [60000, 240000]}},
            "cosmos": {"lost_response_rate": 0.05},
            "host": {"clock_skew_s": {"supervisor": 40, "agents": -30}},
        }
    )
    assert profile.cosmos_lost_response_rate == 0.05
    assert profile.clock_skew_s == {"supervisor": 40.0, "agents": -30.0}
    assert profile.remote["payment"]["slow_latency_ms"] == [60000, 240000]
    with pytest.raises(ProfileError, match=r"host\.clock_skew_s\.workers"):
        Profile.parse({"host": {"clock_skew_s": {"workers": 5}}})
    with pytest.raises(ProfileError, match="within"):
        Profile.parse({"host": {"clock_skew_s": {"agents": 7200}}})
    with pytest.raises(ProfileError, match="lost_response_rate"):
        Profile.parse({"cosmos": {"lost_response_rate": 2}})


def test_functions_map_onto_the_three_simulated_hosts():
    assert host_of("supervisor") == "supervisor"
    assert {host_of(f) for f in ("agent_payment", "agent_shipping", "agent_inventory")} == {"agents"}
    assert host_of("agent_reply_relay") == "app"
    assert host_of("submit_order") == host_of("starter_sweep") == host_of("begin_step") == "app"


def test_each_invocation_reads_its_own_hosts_clock_and_outside_a_task_the_true_time():
    scheduler = TaskScheduler()
    audit = Audit()
    clocks = SkewedClocks(scheduler.clock, scheduler, {"supervisor": 40, "agents": -30}, audit)
    seen: dict[str, timedelta] = {}

    class Function:
        def __init__(self, name: str) -> None:
            self.name = name

    def invocation(name: str) -> None:
        clocks.on_invoke(Function(name))  # type: ignore[arg-type]
        clocks.sleep(5)  # parks the task: the other invocation runs meanwhile
        seen[name] = clocks.now() - scheduler.clock.now()

    for name in ("supervisor", "agent_payment", "submit_order"):
        scheduler.spawn(name, functools.partial(invocation, name))
    while scheduler.busy():
        if not scheduler.run_one():
            wake = scheduler.next_wake()
            assert wake is not None
            scheduler.clock.advance_to(wake)
    scheduler.stop_idle_threads()
    assert seen == {
        "supervisor": timedelta(seconds=40),
        "agent_payment": timedelta(seconds=-30),
        "submit_order": timedelta(0),
    }
    assert clocks.now() == scheduler.clock.now()
    assert audit.injected["clock_skewed_invocations"] == 2


def test_lost_responses_are_drawn_only_when_the_profile_asks():
    audit = Audit()
    quiet = CosmosFaults(Profile(), random.Random(1), audit)
    assert not any(quiet.lose_response() for _ in range(100))
    lossy = CosmosFaults(Profile(cosmos_lost_response_rate=0.5), random.Random(1), audit)
    lost = sum(lossy.lose_response() for _ in range(200))
    assert 60 < lost < 140 and audit.injected["cosmos_responses_lost"] == lost


def test_the_other_cosmos_stores_count_each_call_as_the_request_it_makes():
    from localrun.audit import CountedStore

    class Store:
        def get(self, key: str) -> str:
            return key

        def save(self, doc: str) -> str:
            return doc

        def count_waiting(self, reason: str) -> int:
            return 0

        def describe(self) -> str:
            return "x"

    audit = Audit()
    counted = CountedStore(
        Store(),
        CosmosFaults(Profile(), random.Random(1), audit),
        audit,
        reads=frozenset({"get"}),
        writes=frozenset({"save"}),
        queries=frozenset({"count_waiting"}),
    )
    counted.get("a")
    counted.get("b")
    counted.save("c")
    counted.count_waiting("r")
    counted.describe()
    assert (audit.ops["cosmos_reads"], audit.ops["cosmos_writes"], audit.ops["cosmos_queries"]) == (2, 1, 1)
    assert audit.ops["cosmos_other"] == 1


def test_a_cosmos_outage_fails_every_request_inside_its_window_and_none_outside():
    from adapters.clock import ManualClock
    from adapters.cosmos.errors import StoreUnavailable

    profile = Profile.parse({"cosmos": {"outages": [{"start_s": 10, "duration_s": 20}]}})
    assert profile.cosmos_outages == ((10.0, 20.0),)
    clock = ManualClock()
    origin = clock.now()
    audit = Audit()
    faults = CosmosFaults(profile, random.Random(1), audit, clock)

    def fails_at(second: float) -> bool:
        clock.set(origin + timedelta(seconds=second))
        try:
            faults.maybe_fail("read")
        except StoreUnavailable:
            return True
        return False

    assert [fails_at(s) for s in (0, 9.9, 10, 29.9, 30, 45)] == [False, False, True, True, False, False]
    assert audit.injected["cosmos_outage"] == 2
    refused: list[object] = [[{"start_s": -1, "duration_s": 5}], [{"start_s": 1, "duration_s": 0}], [{"start": 1}], {}]
    for bad in refused:
        with pytest.raises(ProfileError, match=r"cosmos\.outages"):
            Profile.parse({"cosmos": {"outages": bad}})


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"transient_error_rate": 0.7, "permanent_error_rate": 0.5}, r"remote\.payment: .*must not exceed 1"),
        ({"response_loss_rate": 1.5}, r"remote\.payment\.response_loss_rate"),
        ({"slow_call_rate": "often"}, r"remote\.payment\.slow_call_rate"),
        ({"latency_ms": [50, 10]}, r"remote\.payment\.latency_ms"),
        ({"slow_latency_ms": [1000]}, r"remote\.payment\.slow_latency_ms"),
        ({"latency_ms": [10, "x"]}, r"remote\.payment\.latency_ms"),
        ({"outages": [{"start_s": 10}]}, r"remote\.payment\.outages\[0\]\.duration_s"),
        ({"outages": {"start_s": 10, "duration_s": 5}}, r"remote\.payment\.outages must be a list"),
        ({"latency_ms": [0, 1e300]}, r"remote\.payment\.latency_ms .*<= 316224000000"),
        ({"slow_latency_ms": [0, 316224000001]}, r"remote\.payment\.slow_latency_ms"),
        ({"latency_ms": [False, True]}, r"remote\.payment\.latency_ms"),
    ],
)
def test_a_bad_remote_entry_is_a_profile_error_before_the_run(entry: dict[str, object], message: str) -> None:
    # Checked only by the simulator once the run had started, these ended `simulate` with a traceback.
    with pytest.raises(ProfileError, match=message):
        Profile.parse({"remote": {"payment": entry}})


@pytest.mark.parametrize(
    "profile",
    [
        {"cosmos": {"latency_ms": [True, True]}},
        {"servicebus": {"settle_latency_ms": [False, True]}},
        {"orders": {"late_notification_s": [True, True]}},
        {"orders": {"late_notification_s": [0, float("nan")]}},
    ],
)
def test_a_span_of_booleans_is_refused_not_read_as_milliseconds(profile: dict[str, object]) -> None:
    # Red team (extreme faults): ``[true, true]`` passed as [1.0, 1.0] where every other number of a profile
    # refuses a boolean (the rates, the windows, the remote latencies).
    with pytest.raises(ProfileError, match=r"must be \[lo, hi\]"):
        Profile.parse(profile)


def test_the_longest_remote_latency_a_profile_may_name_is_ten_years() -> None:
    longest = 10 * 366 * 24 * 3600 * 1000
    profile = Profile.parse({"remote": {"payment": {"latency_ms": [longest, longest]}}})
    assert profile.remote["payment"]["latency_ms"] == [longest, longest]


def test_a_bad_remote_entry_exits_2_naming_it(tmp_path: Path) -> None:
    from localrun.__main__ import main

    faults = tmp_path / "bad.json"
    faults.write_text('{"remote": {"payment": {"transient_error_rate": 0.7, "permanent_error_rate": 0.5}}}')
    argv = ["simulate", "--orders", "1", "--seed", "1", "--faults", str(faults), "--report", str(tmp_path / "r.json")]
    assert main(argv) == 2
    assert not (tmp_path / "r.json").exists()


def test_a_profile_cannot_point_the_run_at_a_real_remote_service() -> None:
    # before: accepted, and the run's payment agent called that URL over HTTP from simulated time
    with pytest.raises(ProfileError, match=r"settings\.PAYMENT_SERVICE_URL"):
        Profile.parse({"settings": {"PAYMENT_SERVICE_URL": "http://127.0.0.1:9/pay"}})
    assert Profile.parse({"settings": {"PAYMENT_SERVICE_URL": ""}}).settings == {"PAYMENT_SERVICE_URL": ""}


def test_a_cosmos_refusal_window_refuses_the_identity_and_is_a_store_refusal():
    """``"refused": true``: the window refuses as ``mapped_errors`` raises Azure's 403/5301 (``StoreRefused``, a
    ``StoreUnavailable``); a remote service's outage takes no such key."""
    from adapters.clock import ManualClock
    from adapters.cosmos.errors import StoreRefused

    profile = Profile.parse(
        {"cosmos": {"outages": [{"start_s": 10, "duration_s": 20, "refused": True}, {"start_s": 50, "duration_s": 5}]}}
    )
    assert profile.cosmos_refusals == ((10.0, 20.0),) and profile.cosmos_outages == ((50.0, 5.0),)
    clock = ManualClock()
    origin = clock.now()
    audit = Audit()
    faults = CosmosFaults(profile, random.Random(1), audit, clock)
    clock.set(origin + timedelta(seconds=15))
    with pytest.raises(StoreRefused, match="403/5301"):
        faults.maybe_fail("read")
    assert audit.injected["cosmos_refused"] == 1 and audit.injected["cosmos_outage"] == 0
    with pytest.raises(ProfileError, match="refused"):
        Profile.parse({"cosmos": {"outages": [{"start_s": 1, "duration_s": 5, "refused": "yes"}]}})
    with pytest.raises(ProfileError, match=r"remote\.payment\.outages"):
        Profile.parse({"remote": {"payment": {"outages": [{"start_s": 1, "duration_s": 5, "refused": True}]}}})
