"""``python -m localrun fuzz``: a seed names one random fault profile that the runner accepts, the profiles
cover every section a profile has, and a run keeps the files of a seed only when it needs a look."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from localrun import fuzz
from localrun.__main__ import main
from localrun.fuzz import SETTING_DRAWS, SKEW_S, Outcome, random_profile, run_seed
from localrun.profile import TOP_KEYS, Profile

SEEDS = range(1, 401)


def test_a_seed_names_one_profile_and_every_profile_parses() -> None:
    for seed in SEEDS:
        profile = random_profile(seed)
        assert random_profile(seed) == profile
        Profile.parse(json.loads(json.dumps(profile)))  # raises ProfileError on anything the runner refuses
    assert len({json.dumps(random_profile(seed), sort_keys=True) for seed in SEEDS}) == len(SEEDS)


# sha256 of seeds 1-200's profiles as drawn before the operator could cancel (commit 2437cd5)
DRAWN_BEFORE_CANCELS = "d6885335fa5a26458511f4ad34cbffcbb724b1a1d839346373e76507bbd9a3db"


def test_the_operators_cancels_are_drawn_last_and_leave_every_other_draw_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A seed fuzzed before the operator could cancel (and before late activity runs) names the same profile but
    for its cancels, its ``host.activity_rerun_rate``, its ``SUPERVISOR_GRACE_SECONDS``, its stale reads, its
    ``cosmos.service_fault_rate``, the Durable backend's delays and its ``cosmos.partition_ranges`` (and the keys of
    ``seed:knobs-2``, drawn after them all: the next test)."""
    monkeypatch.setattr(fuzz, "_draw_knobs_2", lambda seed, profile: None)
    monkeypatch.setattr(fuzz, "_draw_knobs_3", lambda seed, profile: None)
    monkeypatch.setattr(fuzz, "_draw_knobs_4", lambda seed, profile: None)
    monkeypatch.setattr(fuzz, "_draw_knobs_6", lambda seed, profile: None)
    profiles = [random_profile(seed) for seed in range(1, 201)]
    cancelling = [p["operator"] for p in profiles if "cancel_rate" in p.get("operator", {})]
    assert cancelling and all(0 <= o["cancel_rate"] <= 0.5 for o in cancelling)
    reruns = [p["host"]["activity_rerun_rate"] for p in profiles if "activity_rerun_rate" in p.get("host", {})]
    assert reruns and all(0 <= rate <= 0.3 for rate in reruns)
    graces = {
        p["settings"]["SUPERVISOR_GRACE_SECONDS"]
        for p in profiles
        if "SUPERVISOR_GRACE_SECONDS" in p.get("settings", {})
    }
    assert graces == {"5", "15", "60"}
    stale = [p["cosmos"]["stale_read_rate"] for p in profiles if "stale_read_rate" in p.get("cosmos", {})]
    assert stale and all(0 <= rate <= 0.5 for rate in stale)
    refused = [p["cosmos"]["service_fault_rate"] for p in profiles if "service_fault_rate" in p.get("cosmos", {})]
    assert refused and all(0 <= rate <= 0.08 for rate in refused)
    split = [p["cosmos"]["partition_ranges"] for p in profiles if "partition_ranges" in p.get("cosmos", {})]
    assert set(split) == {2, 3, 4}
    delays = [p["durable"] for p in profiles if "durable" in p]
    assert delays and all(0 <= d["delivery_delay_rate"] <= 0.3 and d["delivery_delay_ms"][1] <= 60_000 for d in delays)
    for profile in profiles:
        if "operator" in profile:
            profile["operator"] = {k: v for k, v in profile["operator"].items() if not k.startswith("cancel")}
        # late activity runs are drawn after everything else: the rest of the seed's profile is as it was
        host = profile.get("host", {})
        host.pop("activity_rerun_rate", None)
        if "host" in profile and not host:
            del profile["host"]
        # and the supervisor's grace after them
        settings = profile.get("settings", {})
        settings.pop("SUPERVISOR_GRACE_SECONDS", None)
        if "settings" in profile and not settings:
            del profile["settings"]
        # and stale reads after it
        cosmos = profile.get("cosmos", {})
        cosmos.pop("stale_read_rate", None)
        cosmos.pop("stale_read_lag_ms", None)
        # and the service's own refusals after them
        cosmos.pop("service_fault_rate", None)
        # and the partition key ranges after everything else
        cosmos.pop("partition_ranges", None)
        if "cosmos" in profile and not cosmos:
            del profile["cosmos"]
        # and the Durable backend's delays after them
        profile.pop("durable", None)
    assert hashlib.sha256(json.dumps(profiles, sort_keys=True).encode()).hexdigest() == DRAWN_BEFORE_CANCELS


# sha256 of seeds 1-400's profiles as drawn before reply send failures, late notifications' delays, refused Cosmos DB
# outages and the operator's discards (commit c70235c)
DRAWN_BEFORE_KNOBS_2 = "ca50372ea2faefd3c28411d2cb38149a0e2db4d7069b577c7cefa8d8fab13c08"


KNOBS_2 = {"reply_send_failure_rate", "late_notification_s", "refused", "discard_orderless"}


def _paths(value: Any, path: tuple[Any, ...] = ()) -> set[tuple[Any, ...]]:
    """Every object's path and every other value's path with the value (lists by index)."""
    if isinstance(value, dict):
        return {(*path, "{}")}.union(*(_paths(v, (*path, k)) for k, v in value.items()))
    if isinstance(value, list):
        return {(*path, "[]")}.union(*(_paths(v, (*path, n)) for n, v in enumerate(value)))
    return {(*path, json.dumps(value))}


def _drawn_without(
    monkeypatch: pytest.MonkeyPatch, generator: str, digest: str
) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Seeds 1-400's profiles, and each paired with its profile drawn without ``generator`` (one of the fuzzer's own
    generators of later knobs), checked to be what the seeds named before it (``digest``)."""
    profiles = [random_profile(seed) for seed in SEEDS]
    with monkeypatch.context() as patched:
        patched.setattr(fuzz, generator, lambda seed, profile: None)
        earlier = [random_profile(seed) for seed in SEEDS]
    assert hashlib.sha256(json.dumps(earlier, sort_keys=True).encode()).hexdigest() == digest
    return profiles, list(zip(earlier, profiles, strict=True))


def test_the_knobs_drawn_from_their_own_generator_leave_every_earlier_draw_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seeds fuzzed before ``seed:knobs-2`` name the same profiles but for those keys, which some seeds now have,
    each within the range docs/local-runner.md gives it (and the objects holding them)."""
    monkeypatch.setattr(fuzz, "_draw_knobs_3", lambda seed, profile: None)  # the next tests'
    monkeypatch.setattr(fuzz, "_draw_knobs_4", lambda seed, profile: None)
    monkeypatch.setattr(fuzz, "_draw_knobs_5", lambda seed, profile: None)
    monkeypatch.setattr(fuzz, "_draw_knobs_6", lambda seed, profile: None)
    profiles, pairs = _drawn_without(monkeypatch, "_draw_knobs_2", DRAWN_BEFORE_KNOBS_2)
    for before, now in pairs:
        old, new = _paths(before), _paths(now)
        assert old <= new  # nothing drawn before changed or went
        # what was added: the new keys, and where an agent or the operator was not there, its object
        assert all(KNOBS_2 & set(path) or path[-1] == "{}" for path in new - old), new - old
    failing = {
        (name, faults["reply_send_failure_rate"])
        for p in profiles
        for name, faults in p.get("agents", {}).items()
        if "reply_send_failure_rate" in faults
    }
    assert {name for name, _ in failing} == {"payment", "payment-backup", "shipping"}  # the Service Bus agents
    assert all(0 <= rate <= 0.1 for _, rate in failing)
    late = [p["orders"] for p in profiles if "late_notification_s" in p.get("orders", {})]
    assert late and all(0 <= lo <= hi <= 3600 for lo, hi in (o["late_notification_s"] for o in late))
    assert all("late_notification_rate" in o for o in late)
    refused = [o for p in profiles for o in p.get("cosmos", {}).get("outages", []) if "refused" in o]
    assert refused and all(o["refused"] is True for o in refused)
    discarding = [p["operator"] for p in profiles if "discard_orderless" in p.get("operator", {})]
    assert discarding and all(o["discard_orderless"] is True for o in discarding)
    assert any(o == {"discard_orderless": True} for o in discarding)  # an operator that only discards
    assert any(len(o) > 1 for o in discarding)  # and one that acts on Error orders too


# sha256 of seeds 1-400's profiles as drawn before payment notifications for orders never submitted (commit e5640c8)
DRAWN_BEFORE_KNOBS_3 = "71d9dbf4f2ac8a7ffeebbb24f6664ccb297d756d5fefa377bbc05e9cb23c4150"


def test_the_knobs_of_the_third_generator_leave_every_earlier_draw_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeds fuzzed before ``seed:knobs-3`` name the same profiles but for ``orders.orderless_notification_rate``,
    which some seeds now have, within the range docs/local-runner.md gives it (and an ``orders`` object where the
    seed had none)."""
    monkeypatch.setattr(fuzz, "_draw_knobs_4", lambda seed, profile: None)  # the next tests'
    monkeypatch.setattr(fuzz, "_draw_knobs_5", lambda seed, profile: None)
    monkeypatch.setattr(fuzz, "_draw_knobs_6", lambda seed, profile: None)
    profiles, pairs = _drawn_without(monkeypatch, "_draw_knobs_3", DRAWN_BEFORE_KNOBS_3)
    for before, now in pairs:
        old, new = _paths(before), _paths(now)
        assert old <= new
        assert all("orderless_notification_rate" in path or path == ("orders", "{}") for path in new - old), new - old
    rates = [
        p["orders"]["orderless_notification_rate"]
        for p in profiles
        if "orderless_notification_rate" in p.get("orders", {})
    ]
    assert rates and all(0 <= rate <= 0.05 for rate in rates)
    # with an operator that discards them in some seeds, and none in others (they wait, told)
    assert any(
        p.get("operator", {}).get("discard_orderless")
        for p in profiles
        if "orderless_notification_rate" in p.get("orders", {})
    )
    assert any(
        not p.get("operator", {}).get("discard_orderless")
        for p in profiles
        if "orderless_notification_rate" in p.get("orders", {})
    )


# sha256 of seeds 1-400's profiles as drawn before the keys no draw named (commit bdaca8f)
DRAWN_BEFORE_KNOBS_6 = "e37d53ffa2150ccc90804ec7a71dcc73ab898c127b01002eae0ba9983ca3fc5b"


def test_the_knobs_no_draw_named_leave_every_earlier_draw_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeds fuzzed before ``seed:knobs-6`` name the same profiles but for ``host.last_try_crash_rate``,
    ``host.worker_threads``, ``host.blocking_threads``, ``durable.max_concurrent_activity_functions`` and the app
    settings of ``SETTING_DRAWS``, which some seeds now have, within the ranges docs/local-runner.md gives them,
    and which the runner's profile takes. Before, no random profile had one of those keys: a last try crashing,
    a small pool or activity limit and those settings were never mixed with the other faults."""
    profiles, pairs = _drawn_without(monkeypatch, "_draw_knobs_6", DRAWN_BEFORE_KNOBS_6)
    added = {"last_try_crash_rate", "worker_threads", "blocking_threads", "max_concurrent_activity_functions"}
    added |= {name for name, _ in SETTING_DRAWS}
    for before, now in pairs:
        old, new = _paths(before), _paths(now)
        assert old <= new
        assert all(added & set(path) or path[1:] == ("{}",) for path in new - old), new - old
        Profile.parse(now)  # a profile the runner takes
    host = [p.get("host", {}) for p in profiles]
    crashes = [h["last_try_crash_rate"] for h in host if "last_try_crash_rate" in h]
    assert crashes and all(0 <= rate <= 0.3 for rate in crashes)
    assert {h["worker_threads"] for h in host if "worker_threads" in h} == {5, 8, 16, 32}
    assert {h["blocking_threads"] for h in host if "blocking_threads" in h} == {5, 8, 16, 32}
    durable = [p.get("durable", {}) for p in profiles]
    limits = {d["max_concurrent_activity_functions"] for d in durable if "max_concurrent_activity_functions" in d}
    assert limits == {2, 5, 10, 20}
    for name, values in SETTING_DRAWS:
        assert {p["settings"][name] for p in profiles if name in p.get("settings", {})} == set(values), name
    # a small pool beside the other host faults, a last try crashing where status queues refuse
    assert any({"worker_threads", "restart_every_s"} <= set(h) for h in host)
    assert any(
        "last_try_crash_rate" in p.get("host", {}) and p.get("status_queues", {}).get("refusing") for p in profiles
    )


def test_the_profiles_reach_every_section_and_the_harsh_corners() -> None:
    profiles = [random_profile(seed) for seed in SEEDS]
    assert set().union(*profiles) == TOP_KEYS
    refusals = [r for p in profiles for r in p.get("status_queues", {}).get("refusing", [])]
    assert {r["error"] for r in refusals} == {"quota_exceeded", "not_found", "unauthorized"}
    assert any("duration_s" not in r for r in refusals)  # refusing to the end of the run
    assert any(p.get("cosmos", {}).get("outages") for p in profiles)
    assert any(len(e.get("outages", [])) == 2 for p in profiles for e in p.get("remote", {}).values())
    # clocks skewed, never beyond what the app assumes of its hosts (a seed of 113 s failed orders by design)
    skews = [abs(v) for p in profiles for v in p.get("host", {}).get("clock_skew_s", {}).values()]
    assert skews and max(skews) <= SKEW_S


def test_a_seed_that_holds_every_invariant_leaves_nothing_behind(tmp_path: Path) -> None:
    outcome = run_seed(3, orders=4, out=tmp_path, timeout_s=600)
    assert outcome.error is None and outcome.violated == {}, outcome
    assert list(tmp_path.iterdir()) == []
    assert outcome.line().startswith("seed 3: ok")


def test_a_run_that_does_not_finish_is_a_failure_with_its_profile_kept(tmp_path: Path) -> None:
    outcome = run_seed(3, orders=4, out=tmp_path, timeout_s=0.01)
    assert outcome.error is not None and "no result" in outcome.error
    assert (tmp_path / "profile-3.json").exists()
    assert "RUN FAILED" in outcome.line()


def test_a_violation_is_named_on_its_line() -> None:
    line = Outcome(7, {"lost": 2}, {"MaxDeliveryCountExceeded": 1, "UnknownOrder": 0}, 3, True, 12.3).line()
    assert line == (
        'seed 7: VIOLATED {"lost": 2} (MaxDeliveryCountExceeded 1, operator_actions_needed 3, horizon reached) 12 s'
    )


def test_a_run_that_would_never_end_says_so_on_its_line() -> None:
    """Fuzz seed 8437: its line said "horizon reached" alone, as for a run a longer horizon would end."""
    line = Outcome(8437, {}, {}, 0, True, 69.2, endless_for=("submitter-1-statuses",)).line()
    assert line == (
        "seed 8437: ok (horizon reached, never ends: statuses owed to submitter-1-statuses, full for good) 69 s"
    )


@pytest.mark.parametrize("flags", [["--count", "0"], ["--orders", "0"], ["--timeout", "0"]])
def test_nonsense_arguments_are_refused(flags: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["fuzz", *flags])
    assert exit_.value.code == 2


# sha256 of seeds 1-400's profiles as drawn before the Durable backend's outages and late starts (commit 43191ab)
DRAWN_BEFORE_KNOBS_4 = "849d005cde14d77cd8cfb4621b13f5bb5cb7b615e87f9358cfd9436022f981de"


def test_the_durable_backends_outages_and_late_starts_leave_every_earlier_draw_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seeds fuzzed before ``seed:knobs-4`` name the same profiles but for ``durable.outages`` and
    ``durable.late_start_rate`` / ``late_start_ms``, which some seeds now have, within the ranges
    docs/local-runner.md gives them, and which the runner's profile accepts."""
    monkeypatch.setattr(fuzz, "_draw_knobs_5", lambda seed, profile: None)  # the next tests'
    monkeypatch.setattr(fuzz, "_draw_knobs_6", lambda seed, profile: None)
    profiles, pairs = _drawn_without(monkeypatch, "_draw_knobs_4", DRAWN_BEFORE_KNOBS_4)
    for before, now in pairs:
        old, new = _paths(before), _paths(now)
        assert old <= new
        added = {"outages", "late_start_rate", "late_start_ms"}
        assert all(added & set(path) or path == ("durable", "{}") for path in new - old), new - old
        Profile.parse(now)  # a profile the runner takes
    outages = [p["durable"]["outages"] for p in profiles if "outages" in p.get("durable", {})]
    assert outages and all(1 <= len(windows) <= 4 for windows in outages)
    assert all(0 <= w["start_s"] <= 900 and 1 <= w["duration_s"] <= 60 for windows in outages for w in windows)
    late = [p["durable"] for p in profiles if "late_start_rate" in p.get("durable", {})]
    assert late and all(0 <= d["late_start_rate"] <= 0.3 and d["late_start_ms"][1] <= 120_000 for d in late)
    # beside the backend's delays in some seeds (the same ``durable`` object)
    assert any({"delivery_delay_rate", "outages"} <= set(p.get("durable", {})) for p in profiles)


# sha256 of seeds 1-400's profiles as drawn before bare Durable outages (commit ec87dab)
DRAWN_BEFORE_KNOBS_5 = "e77db47d6ca3046c4c768942f88cb36941bb4dce5e4d39ade748132d4168a808"


def test_bare_durable_outages_leave_every_earlier_draw_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeds fuzzed before ``seed:knobs-5`` name the same profiles but for ``"bare": true`` on some of their
    ``durable.outages`` windows (a 500 with no body: ``read_status`` tells it from a 404 by its code), which the
    runner's profile takes. Before, no random profile had one: the fuzzer never met the host's own 500."""
    monkeypatch.setattr(fuzz, "_draw_knobs_6", lambda seed, profile: None)  # the next test's
    profiles, pairs = _drawn_without(monkeypatch, "_draw_knobs_5", DRAWN_BEFORE_KNOBS_5)
    for before, now in pairs:
        old, new = _paths(before), _paths(now)
        assert old <= new
        assert all(path[-2] == "bare" and path[:2] == ("durable", "outages") for path in new - old), new - old
        parsed = Profile.parse(now)  # a profile the runner takes, every window in one of its two kinds
        assert set(parsed.durable_outages + parsed.durable_bare_outages) == {
            (w["start_s"], w["duration_s"]) for w in now.get("durable", {}).get("outages", [])
        }
    windows = [p["durable"]["outages"] for p in profiles if "outages" in p.get("durable", {})]
    bare = [w for ws in windows for w in ws if "bare" in w]
    assert bare and all(w["bare"] is True for w in bare)
    assert any("bare" not in w for ws in windows for w in ws)  # error-object windows stay
    assert any({"bare" in w for w in ws} == {True, False} for ws in windows)  # both kinds in one seed
