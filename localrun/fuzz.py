"""``python -m localrun fuzz --first S --count N [--orders O] [--out DIR]``: random fault profiles, one per
seed, each run through the whole app as ``simulate`` runs it (a process of its own, so one run's crash or
memory never touches the next), one line per seed; the profile and report of every seed that violated an
invariant are kept in DIR to run again (``simulate --faults DIR/profile-S.json --seed S``). Exit code 1 if
any seed violated one.

The example profiles test each fault on its own; this mixes them at random rates, which is how most of the
failures in docs/benchmark.md's findings were met first. A profile is built from the seed alone
(``random_profile``), every key of it one ``localrun/profile.py`` documents, so a seed names a profile for
good (as long as this file's draws stay as they are)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.workflow import AGENTS, Transport
from localrun.profile import CLOCK_HOSTS, OPERATOR_REVIEW_ANSWERS, REFUSAL_ERRORS

# What a line reports beyond the invariants: orders an operator must act on for an outage alone, and the
# dead-letter reasons that mean something was delivered too often or to nobody (each is worth a look).
WATCHED_DEAD_LETTERS = ("MaxDeliveryCountExceeded", "UnknownOrder")
SKEW_S = 20.0  # each host's clock within this of the true time


def _window(rng: random.Random, start: tuple[float, float], duration: tuple[float, float]) -> dict[str, float]:
    return {"start_s": round(rng.uniform(*start), 1), "duration_s": round(rng.uniform(*duration), 1)}


def _span(rng: random.Random, low: float, high: float) -> list[float]:
    a, b = sorted((round(rng.uniform(low, high)), round(rng.uniform(low, high))))
    return [a, b]


def random_profile(seed: int) -> dict[str, Any]:
    """A fault profile drawn from ``seed``: each section present or not, at rates from none to harsh."""
    rng = random.Random(seed)
    profile: dict[str, Any] = {}
    agents = {
        name: {
            key: round(rng.uniform(0, 0.1), 3)
            for key in ("crash_rate", "late_reply_rate", "duplicate_reply_rate", "lost_reply_rate")
            if rng.random() < 0.5
        }
        for name in AGENTS
        if rng.random() < 0.5
    }
    if agents:
        profile["agents"] = agents
    remote: dict[str, Any] = {}
    for service in sorted({a.service for a in AGENTS.values()}):
        if rng.random() < 0.4:
            continue
        transient = round(rng.uniform(0, 0.4), 3) if rng.random() < 0.6 else 0.0
        entry: dict[str, Any] = {"latency_ms": _span(rng, 10, 3000)}
        if transient:
            entry["transient_error_rate"] = transient
        if rng.random() < 0.4:
            entry["permanent_error_rate"] = round(rng.uniform(0, min(0.2, 1 - transient)), 3)
        if rng.random() < 0.3:
            entry["response_loss_rate"] = round(rng.uniform(0, 0.05), 3)
        if rng.random() < 0.3:
            entry["slow_call_rate"] = round(rng.uniform(0, 0.1), 3)
            entry["slow_latency_ms"] = _span(rng, 5_000, 60_000)
        if rng.random() < 0.35:
            entry["outages"] = [_window(rng, (0, 600), (30, 1800)) for _ in range(rng.randint(1, 2))]
        remote[service] = entry
    if remote:
        profile["remote"] = remote
    cosmos: dict[str, Any] = {}
    for key, high in (("throttle_rate", 0.3), ("unavailable_rate", 0.05), ("lost_response_rate", 0.05)):
        if rng.random() < 0.35:
            cosmos[key] = round(rng.uniform(0, high), 3)
    if rng.random() < 0.2:
        cosmos["latency_ms"] = _span(rng, 0, 500)
    if rng.random() < 0.15:
        cosmos["outages"] = [_window(rng, (0, 400), (5, 180))]
    if cosmos:
        profile["cosmos"] = cosmos
    servicebus: dict[str, Any] = {}
    for key, high in (("send_failure_rate", 0.15), ("lock_expiry_rate", 0.25)):
        if rng.random() < 0.35:
            servicebus[key] = round(rng.uniform(0, high), 3)
    if rng.random() < 0.2:
        servicebus["settle_latency_ms"] = _span(rng, 0, 2000)
    if servicebus:
        profile["servicebus"] = servicebus
    host: dict[str, Any] = {}
    if rng.random() < 0.35:
        host["restart_every_s"] = round(rng.uniform(20, 300))
    # hosts are assumed to agree within seconds (docs/supervisor.md, dependency outages: a supervisor ahead of
    # the claimer by about START_GRACE_SECONDS counts fresh claims expired); 40 s apart at most here
    skew = {h: round(rng.uniform(-SKEW_S, SKEW_S), 1) for h in CLOCK_HOSTS if rng.random() < 0.2}
    if skew:
        host["clock_skew_s"] = skew
    if host:
        profile["host"] = host
    for key in ("supervisors", "starters"):
        if rng.random() < 0.4:
            profile[key] = rng.randint(1, 3)
    orders = {
        key: round(rng.uniform(0, high), 3)
        for key, high in (
            ("cancel_rate", 0.2),
            ("malformed_rate", 0.1),
            ("duplicate_submit_rate", 0.2),
            ("payment_notification_first_rate", 1.0),
            ("prepaid_rate", 0.4),
            ("long_id_rate", 0.2),
            ("concurrent_notification_rate", 0.3),
            ("late_notification_rate", 0.2),
        )
        if rng.random() < 0.4
    }
    if orders:
        profile["orders"] = orders
    submitters = rng.randint(1, 4)
    profile["reply_queues"] = submitters
    status_queues: dict[str, Any] = {}
    if rng.random() < 0.15:
        status_queues["name_length"] = rng.randint(20, 260)
    refusing = []
    for _ in range(rng.randint(0, 2) if rng.random() < 0.3 else 0):
        refusal: dict[str, Any] = {
            "submitter": rng.randint(1, submitters),
            "error": rng.choice(REFUSAL_ERRORS),
            "start_s": round(rng.uniform(0, 300), 1),
        }
        if rng.random() < 0.6:
            refusal["duration_s"] = round(rng.uniform(30, 1800), 1)
        refusing.append(refusal)
    if refusing:
        status_queues["refusing"] = refusing
    if status_queues:
        profile["status_queues"] = status_queues
    admission = {key: rng.randint(2, 20) for key in ("max_pending", "max_in_flight") if rng.random() < 0.15}
    if admission:
        profile["admission"] = admission
    if rng.random() < 0.25:
        profile["settings"] = {"MAX_OUTAGE_WAIT_MINUTES": rng.choice(["0", "5", "30", "120"])}
    # drawn last: the sections above are each seed's as before the operator existed
    if rng.random() < 0.3:
        resubmit = round(rng.uniform(0, 1), 2)
        profile["operator"] = {
            "resubmit_rate": resubmit,
            "compensate_rate": round(rng.uniform(0, 1 - resubmit), 2),
            "answer_reviews": rng.choice([None, *OPERATOR_REVIEW_ANSWERS]),
            "after_s": _span(rng, 0, 900),
            "max_actions_per_order": rng.randint(1, 4),
        }
        # drawn after the rest of the operator: each seed's profile is as before but for its cancels
        if rng.random() < 0.5:
            profile["operator"]["cancel_rate"] = round(rng.uniform(0, 0.5), 2)
            profile["operator"]["cancel_after_s"] = _span(rng, 0, 300)
    # drawn after everything else, operator included: each seed's profile is as before but for late activity runs
    if rng.random() < 0.25:
        profile.setdefault("host", {})["activity_rerun_rate"] = round(rng.uniform(0, 0.3), 3)
    # drawn after late activity runs: the supervisor's grace past a held record's completeBy, as the Bicep sets it
    # (15) or around it, so that the recoveries run with a grace too (local runs default to 0); each seed's
    # profile is as before but for this setting
    if rng.random() < 0.3:
        profile.setdefault("settings", {})["SUPERVISOR_GRACE_SECONDS"] = rng.choice(["5", "15", "60"])
    # drawn after the grace: stale reads under Session consistency (localrun/stale_reads.py); each seed's profile
    # is as before but for them
    if rng.random() < 0.3:
        stale = profile.setdefault("cosmos", {})
        stale["stale_read_rate"] = round(rng.uniform(0, 0.5), 3)
        stale["stale_read_lag_ms"] = rng.choice([200, 1000, 2000, 5000])
    # drawn after stale reads: Cosmos DB refusing the SDK's tries itself (localrun/service_faults.py), so the SDK's
    # own retry policies run; in fewer seeds and at lower rates than the others, since the SDK's waits are real
    # time; each seed's profile is as before but for them
    if rng.random() < 0.15:
        profile.setdefault("cosmos", {})["service_fault_rate"] = round(rng.uniform(0, 0.08), 3)
    # drawn after the service faults: the Durable backend late (``DurableEngine.delivery_delay``), from Azure Storage's
    # polling (10 s) to a partition lease moving (a minute); each seed's profile is as before but for it
    if rng.random() < 0.3:
        profile["durable"] = {
            "delivery_delay_rate": round(rng.uniform(0, 0.3), 3),
            "delivery_delay_ms": rng.choice([[0, 10_000], [1_000, 30_000], [5_000, 60_000]]),
        }
    # drawn after the Durable delays: containers split into partition key ranges (localrun/cosmos_ranges.cjs), the
    # SDK planning and merging the cross-partition queries as on Azure; each seed's profile is as before but for it
    if rng.random() < 0.25:
        profile.setdefault("cosmos", {})["partition_ranges"] = rng.choice([2, 3, 4])
    _draw_knobs_2(seed, profile)
    _draw_knobs_3(seed, profile)
    _draw_knobs_4(seed, profile)
    _draw_knobs_5(seed, profile)
    _draw_knobs_6(seed, profile)
    return profile


def _draw_knobs_2(seed: int, profile: dict[str, Any]) -> None:
    """The knobs added after the partition ranges, from a generator of their own (``seed:knobs-2``): every key
    drawn above is each seed's as before. An agent's reply sends failing (Service Bus agents), a late payment
    notification's delay, a Cosmos DB outage refusing the app's identity, and the operator discarding the payment
    notifications no order came for (an operator with nothing else to do where the seed had none)."""
    rng = random.Random(f"{seed}:knobs-2")
    for name in sorted(n for n, a in AGENTS.items() if a.transport is Transport.SERVICE_BUS):
        if rng.random() < 0.15:
            agents = profile.setdefault("agents", {})
            agents.setdefault(name, {})["reply_send_failure_rate"] = round(rng.uniform(0, 0.1), 3)
    orders = profile.get("orders", {})
    if "late_notification_rate" in orders and rng.random() < 0.5:
        orders["late_notification_s"] = _span(rng, 0, 3600)
    outages = profile.get("cosmos", {}).get("outages", [])
    if outages and rng.random() < 0.3:
        outages[0]["refused"] = True
    if rng.random() < 0.3:
        profile.setdefault("operator", {})["discard_orderless"] = True


def _draw_knobs_3(seed: int, profile: dict[str, Any]) -> None:
    """The knobs added after ``seed:knobs-2``'s, from a generator of their own (``seed:knobs-3``): every key drawn
    before is each seed's as before. Payment notifications for orders never submitted
    (``orders.orderless_notification_rate``), so that an operator that discards them has work, and the report
    checks what it was told (``operator_answers_broken``)."""
    rng = random.Random(f"{seed}:knobs-3")
    if rng.random() < 0.25:
        profile.setdefault("orders", {})["orderless_notification_rate"] = round(rng.uniform(0, 0.05), 3)


def _draw_knobs_4(seed: int, profile: dict[str, Any]) -> None:
    """The knobs added after ``seed:knobs-3``'s, from a generator of their own (``seed:knobs-4``): every key drawn
    before is each seed's as before. The Durable backend failing the app's calls for seconds to a minute
    (``durable.outages``: the relay's retry rounds, the supervisor's missed starts) and taking starts it records late
    (``durable.late_start_rate``, ``late_start_ms``: a 404 for an instance that then runs, fenced)."""
    rng = random.Random(f"{seed}:knobs-4")
    if rng.random() < 0.25:
        windows = [_window(rng, (0, 900), (1, 60)) for _ in range(rng.randint(1, 4))]
        profile.setdefault("durable", {})["outages"] = sorted(windows, key=lambda w: w["start_s"])
    if rng.random() < 0.2:
        durable = profile.setdefault("durable", {})
        durable["late_start_rate"] = round(rng.uniform(0, 0.3), 3)
        durable["late_start_ms"] = rng.choice([[0, 10_000], [5_000, 60_000], [0, 120_000]])


def _draw_knobs_5(seed: int, profile: dict[str, Any]) -> None:
    """The knobs added after ``seed:knobs-4``'s, from a generator of their own (``seed:knobs-5``): every key drawn
    before is each seed's as before. In about half the seeds with Durable outages, each window ``"bare": true`` at
    even odds: a 500 with no body, the host's own, not the extension's error object (``read_status`` tells it from
    a 404 by its HTTP code alone)."""
    rng = random.Random(f"{seed}:knobs-5")
    windows = profile.get("durable", {}).get("outages", [])
    if windows and rng.random() < 0.5:
        for window in windows:
            if rng.random() < 0.5:
                window["bare"] = True


# knobs-6's settings: app settings that change what the app does with a failing order (how many attempts, what a
# review that times out does and when, how far a supervisor run gets, how long a deferred message waits), each
# drawn from values ``Settings`` accepts with the others' defaults
SETTING_DRAWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("MAX_FAILURES", ("1", "2", "5")),
    ("REVIEW_AMOUNT_THRESHOLD_CENTS", ("0", "20000", "500000")),
    ("REVIEW_TIMEOUT_SECONDS", ("60", "600", "3600")),
    ("REVIEW_DEFAULT_ACTION", ("retry", "alternative")),
    ("SUPERVISOR_MAX_RECORDS", ("1", "5", "20")),
    ("SUPERVISOR_PAGE_SIZE", ("1", "3", "10")),
    ("DEFER_MAX_ROUNDS", ("1", "2", "6")),
)


def _draw_knobs_6(seed: int, profile: dict[str, Any]) -> None:
    """The knobs added after ``seed:knobs-5``'s, from a generator of their own (``seed:knobs-6``): every key drawn
    before is each seed's as before. The profile keys no draw above named: a final status's or an alert courier's
    last try crashing before its code runs (``host.last_try_crash_rate``), the worker's pools smaller than the
    Bicep's 104 threads (``host.worker_threads``, ``host.blocking_threads``: the sizes ``min(32, cores + 4)`` of a
    worker whose ``PYTHON_THREADPOOL_THREAD_COUNT`` is unset, 5 on a Flex Consumption instance's one core; a
    smaller one is a setting below those, which docs/settings.md warns against) and the Durable extension's
    activity limit below host.json's 40 (``durable.max_concurrent_activity_functions``); and, each at 15 %, the app
    settings of ``SETTING_DRAWS``."""
    rng = random.Random(f"{seed}:knobs-6")
    if rng.random() < 0.2:
        profile.setdefault("host", {})["last_try_crash_rate"] = round(rng.uniform(0, 0.3), 3)
    if rng.random() < 0.15:
        profile.setdefault("host", {})["worker_threads"] = rng.choice([5, 8, 16, 32])
    if rng.random() < 0.15:
        profile.setdefault("host", {})["blocking_threads"] = rng.choice([5, 8, 16, 32])
    if rng.random() < 0.15:
        profile.setdefault("durable", {})["max_concurrent_activity_functions"] = rng.choice([2, 5, 10, 20])
    for name, values in SETTING_DRAWS:
        if rng.random() < 0.15:
            profile.setdefault("settings", {})[name] = rng.choice(values)


@dataclass(frozen=True)
class Outcome:
    seed: int
    violated: dict[str, int]
    watched: dict[str, int]
    operator_actions_needed: int
    horizon_reached: bool
    wall_s: float
    error: str | None = None
    # the status queues, full to the end, that kept a run cut by its horizon from ever ending (the report's
    # ``endless_for``): the app sends a failure's status to them until acknowledged, as designed
    endless_for: tuple[str, ...] = ()

    def line(self) -> str:
        if self.error:
            return f"seed {self.seed}: RUN FAILED ({self.error})"
        verdict = "VIOLATED " + json.dumps(self.violated) if self.violated else "ok"
        extras = [f"{k} {v}" for k, v in self.watched.items() if v]
        if self.operator_actions_needed:
            extras.append(f"operator_actions_needed {self.operator_actions_needed}")
        if self.endless_for:
            extras.append(f"horizon reached, never ends: statuses owed to {', '.join(self.endless_for)}, full for good")
        elif self.horizon_reached:
            extras.append("horizon reached")
        return f"seed {self.seed}: {verdict}" + (f" ({', '.join(extras)})" if extras else "") + f" {self.wall_s:.0f} s"


def run_seed(seed: int, orders: int, out: Path, timeout_s: float) -> Outcome:
    """Runs ``random_profile(seed)`` for ``orders`` orders in a ``simulate`` process of its own; keeps the
    profile and report in ``out`` when an invariant is violated or the run fails."""
    out.mkdir(parents=True, exist_ok=True)
    profile_path, report_path = out / f"profile-{seed}.json", out / f"report-{seed}.json"
    kept_before = profile_path.exists() or report_path.exists()  # an earlier fuzz's failing seed
    command = [sys.executable, "-m", "localrun", "simulate", "--orders", str(orders), "--seed", str(seed)]
    command += ["--faults", str(profile_path), "--report", str(report_path), "--no-progress"]
    began = time.monotonic()
    try:
        profile_path.write_text(json.dumps(random_profile(seed), indent=2) + "\n")
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(seed, {}, {}, 0, False, time.monotonic() - began, f"no result in {timeout_s:.0f} s")
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM: the run was ended (subprocess.run kills it); not a failing seed
        if not kept_before:
            profile_path.unlink(missing_ok=True)
            report_path.unlink(missing_ok=True)
        raise
    wall = time.monotonic() - began
    if done.returncode not in (0, 1) or not report_path.exists():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Outcome(seed, {}, {}, 0, False, wall, f"exit {done.returncode}: {tail[:300]}")
    report = json.loads(report_path.read_text())
    violated = {k: v for k, v in report["invariants"].items() if v}
    reasons = [d.get("reason") for d in report.get("dead_letters", [])]
    watched = {reason: reasons.count(reason) for reason in WATCHED_DEAD_LETTERS}
    if not violated:
        profile_path.unlink()
        report_path.unlink()
    return Outcome(
        seed,
        violated,
        watched,
        int(report["operator_actions_needed"]),
        bool(report["horizon_reached"]),
        wall,
        endless_for=tuple(report.get("endless_for", [])),
    )


def fuzz(first: int, count: int, orders: int, out: Path, timeout_s: float) -> int:
    """Runs seeds ``first`` .. ``first + count - 1``, printing a line each; 1 if any violated or failed."""
    bad = 0
    for seed in range(first, first + count):
        try:
            outcome = run_seed(seed, orders, out, timeout_s)
        except KeyboardInterrupt:  # the tally so far, then the interruption goes on up (exit 130)
            ran = seed - first
            print(f"interrupted at seed {seed}: {ran} seeds run, {bad} with a violated invariant or a failed run")
            raise
        print(outcome.line(), flush=True)
        bad += bool(outcome.violated or outcome.error)
    print(f"{count} seeds, {bad} with a violated invariant or a failed run" + (f": see {out}" if bad else ""))
    return 1 if bad else 0
