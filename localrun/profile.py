"""Fault profiles: what goes wrong during a simulation, and how often.

A profile is JSON; every key is optional; rates are probabilities per operation; agent and service
names are the workflow table's. An unknown key is an error that names the key, so a typo can never
silently switch a fault off."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from contracts.parsing import RepeatedName, each_name_once
from domain.workflow import AGENTS

AGENT_KEYS = {"crash_rate", "late_reply_rate", "duplicate_reply_rate", "lost_reply_rate", "reply_send_failure_rate"}
REMOTE_KEYS = {
    "latency_ms",
    "transient_error_rate",
    "permanent_error_rate",
    "outages",
    "response_loss_rate",
    "slow_call_rate",
    "slow_latency_ms",
}
COSMOS_KEYS = {
    "throttle_rate",
    "unavailable_rate",
    "lost_response_rate",
    "latency_ms",
    "outages",
    "stale_read_rate",
    "stale_read_lag_ms",
    "service_fault_rate",
    "partition_ranges",
}
OUTAGE_KEYS = {"start_s", "duration_s"}
# the longest time a profile may name (a start, a duration, a restart interval): ten years, past any run's horizon
# (simulate's is a year at most) and far from what Python's dates can hold (1e300 s was an OverflowError)
MAX_SECONDS = 10 * 366 * 24 * 3600
# host.restart_every_s's least: 100 restarts a simulated second, each reached (a 200-order run: about 75,000 of them,
# a fraction of a millisecond each); below it, the run's wall time grows as its inverse
MIN_RESTART_EVERY_S = 0.01
SERVICEBUS_KEYS = {"send_failure_rate", "lock_expiry_rate", "settle_latency_ms"}
HOST_KEYS = {
    "restart_every_s",
    "clock_skew_s",
    "activity_rerun_rate",
    "last_try_crash_rate",
    "worker_threads",
    "blocking_threads",
}
DURABLE_KEYS = {
    "delivery_delay_rate",
    "delivery_delay_ms",
    "outages",
    "max_concurrent_activity_functions",
    "late_start_rate",
    "late_start_ms",
}
# the most a profile's pools and concurrency limits may name (a run with more is one without a limit)
MAX_THREADS = 256
MAX_CONCURRENT_ACTIVITIES = 1000
# the Durable backend's lateness: up to 10 minutes (a partition whose lease moves, a worker restarting)
DELIVERY_DELAY_MAX_MS = 600_000
# The simulated hosts whose clocks may be skewed (host.clock_skew_s): the supervisor's timer, the
# agents (the functions that call remote services) and every other function of the app.
# Orchestrations read time from the Durable extension's history, and Cosmos DB, Service Bus and
# the remote services keep the true time.
CLOCK_HOSTS = ("supervisor", "agents", "app")
ORDER_KEYS = {
    "cancel_rate",
    "malformed_rate",
    "duplicate_submit_rate",
    "payment_notification_first_rate",
    "prepaid_rate",
    "long_id_rate",
    "concurrent_notification_rate",
    "late_notification_rate",
    "late_notification_s",
    "orderless_notification_rate",
}
STATUS_QUEUE_KEYS = {"name_length", "refusing"}
REFUSAL_KEYS = {"submitter", "error", "start_s", "duration_s"}
REFUSAL_ERRORS = ("quota_exceeded", "not_found", "unauthorized")
ADMISSION_KEYS = {"max_pending", "max_in_flight"}
TOP_KEYS = {
    "agents",
    "remote",
    "cosmos",
    "servicebus",
    "host",
    "durable",
    "supervisors",
    "starters",
    "orders",
    "reply_queues",
    "status_queues",
    "admission",
    "settings",
    "operator",
}
OPERATOR_KEYS = {
    "resubmit_rate",
    "compensate_rate",
    "answer_reviews",
    "after_s",
    "max_actions_per_order",
    "cancel_rate",
    "cancel_after_s",
    "discard_orderless",
}
# what the runner's operator answers a review with (``operator.answer_reviews``; null: reviews time out)
OPERATOR_REVIEW_ANSWERS = ("compensate", "retry", "alternative", "fail")


class ProfileError(ValueError):
    pass


def _check_keys(where: str, data: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ProfileError(f"{where} must be an object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ProfileError(f"unknown key {where}.{unknown[0]} (allowed: {', '.join(sorted(allowed))})")
    return data


def _rate(where: str, value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ProfileError(f"{where} must be a probability between 0 and 1, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class AgentFaults:
    crash_rate: float = 0.0
    late_reply_rate: float = 0.0
    duplicate_reply_rate: float = 0.0
    lost_reply_rate: float = 0.0
    # the reply's send raises (SendError, after the SDK's own retries): the agent did the work and cannot say so
    reply_send_failure_rate: float = 0.0


@dataclass(frozen=True)
class OrderMix:
    cancel_rate: float = 0.0
    malformed_rate: float = 0.0
    duplicate_submit_rate: float = 0.0
    payment_notification_first_rate: float = 0.0
    prepaid_rate: float = 0.0
    long_id_rate: float = 0.0  # orders whose id is 64 characters, the longest the contract accepts
    concurrent_notification_rate: float = 0.0  # a prepaid order's notification sent at the same instant
    late_notification_rate: float = 0.0  # a prepaid order's notification sent late_notification_s after it
    late_notification_s: tuple[float, float] = (300.0, 600.0)
    # per order of the workload: a payment notification for an order id never submitted (``orderless-<n>``), sent at
    # a uniform time while the orders arrive, that nothing but an operator's discard settles
    orderless_notification_rate: float = 0.0


@dataclass(frozen=True)
class StatusQueueRefusal:
    """Submitter ``submitter`` (1-based)'s status queue refuses sends from ``start_s`` for
    ``duration_s`` (None: to the end of the run) with ``error``."""

    submitter: int
    error: str
    start_s: float = 0.0
    duration_s: float | None = None


@dataclass(frozen=True)
class StatusQueues:
    name_length: int | None = None  # pad each submitter's queue name to this many characters
    refusing: tuple[StatusQueueRefusal, ...] = ()


@dataclass(frozen=True)
class OperatorPlan:
    """``operator``: the runner's operator (localrun/operator.py). At a random delay of ``after_s`` simulated
    seconds after an order reaches ``Error``, it resubmits it (``resubmit_rate``) or compensates it
    (``compensate_rate``, drawn after the resubmit); after ``CompensationFailed``, it compensates it again
    (``compensate_rate``); after a review is requested, it answers ``answer_reviews`` (None: it lets the review
    time out). At most ``max_actions_per_order`` actions an order. Apart from those: at a random delay of
    ``cancel_after_s`` after an order is first written, it cancels it (``cancel_rate``; at most once an order);
    with ``discard_orderless``, at a random delay of ``after_s`` after a ``PaymentWithoutOrder`` alert, it refunds
    the payment (nothing to undo at the simulated provider: an uncaptured payment) and discards the notification
    (``POST ops/orders/{id}/deferred/{seq}/discard``; once an alert, not counted in ``max_actions_per_order``)."""

    resubmit_rate: float = 0.0
    compensate_rate: float = 0.0
    answer_reviews: str | None = None
    after_s: tuple[float, float] = (60.0, 600.0)
    max_actions_per_order: int = 3
    cancel_rate: float = 0.0
    cancel_after_s: tuple[float, float] = (0.0, 300.0)
    discard_orderless: bool = False


@dataclass(frozen=True)
class Profile:
    agents: dict[str, AgentFaults] = field(default_factory=dict)
    remote: dict[str, dict[str, Any]] = field(default_factory=dict)
    cosmos_throttle_rate: float = 0.0
    cosmos_unavailable_rate: float = 0.0
    send_failure_rate: float = 0.0
    restart_every_s: float | None = None
    cosmos_lost_response_rate: float = 0.0
    clock_skew_s: dict[str, float] = field(default_factory=dict)
    supervisors: int = 1
    starters: int = 1
    orders: OrderMix = field(default_factory=OrderMix)
    reply_queues: int = 3
    lock_expiry_rate: float = 0.0
    status_queues: StatusQueues = field(default_factory=StatusQueues)
    max_pending: int | None = None
    max_in_flight: int | None = None
    cosmos_latency_ms: tuple[float, float] | None = None
    # windows (start, duration; seconds from the run's start) in which every Cosmos DB request fails
    cosmos_outages: tuple[tuple[float, float], ...] = ()
    # windows in which Cosmos DB refuses the app's identity (403/5301: its role propagating, or removed)
    cosmos_refusals: tuple[tuple[float, float], ...] = ()
    settle_latency_ms: tuple[float, float] | None = None
    settings: dict[str, str] = field(default_factory=dict)  # app settings this profile overrides
    operator: OperatorPlan | None = None  # None: no operator acts (a review pause times out)
    # the share of activities run again 5 minutes after their result reached the orchestration (a worker
    # that died before it deleted the work item: ``DurableEngine.rerun_after_completion``)
    activity_rerun_rate: float = 0.0
    # the share of the activity executions whose input says ``lastTry`` (a final status's or an alert courier's last
    # try, and its repeats) that fail before their code runs, as the Durable extension reports a worker process that
    # exited (or was restarted at ``functionTimeout``) under them (``DurableEngine.crash_before_run``)
    last_try_crash_rate: float = 0.0
    # Session consistency seen from another instance (localrun/stale_reads.py): a read by an invocation that
    # has not seen a document's latest write, made within the lag of it, returns the version before it (or 404
    # for a create) at this rate
    cosmos_stale_read_rate: float = 0.0
    cosmos_stale_read_lag_ms: float = 1000.0
    # the share of the Cosmos client's document requests the protocol server refuses as Azure does (429, 503, 410,
    # 449, 404/1002: localrun/service_faults.py), below the SDK, whose own retry policies answer them
    cosmos_service_fault_rate: float = 0.0
    # the physical partition key ranges every container is split into (localrun/cosmos_ranges.cjs): the SDK fetches
    # a query plan and merges its cross-partition queries' per-range results itself, as on Azure past one partition
    cosmos_partition_ranges: int = 1
    # the Durable backend's latency (``DurableEngine.delivery_delay``): the share of its control-queue messages
    # (starts, raised events, timers firing, activity results) and activity work items that reach their worker
    # late, by a uniform ``durable_delivery_delay_ms`` (one instance's messages still in the order sent)
    durable_delivery_delay_rate: float = 0.0
    durable_delivery_delay_ms: tuple[float, float] = (0.0, 10_000.0)
    # windows (start, duration; seconds from the run's start) in which the Durable extension's HTTP API answers every
    # client call (raise_event, get_status, start_new, terminate, purge) with a 500, its storage failing; the backend's
    # own work (orchestrations, activities, timers) goes on (``hostile.DurableOutages``)
    durable_outages: tuple[tuple[float, float], ...] = ()
    # the windows of ``durable.outages`` given ``"bare": true``: the 500 has no body (not the extension's error object:
    # what the Functions host answers for a failure in front of the extension)
    durable_bare_outages: tuple[tuple[float, float], ...] = ()
    # starts the Durable backend takes but records late (``DurableEngine.late_start``): at this rate (per instance id) a
    # start is answered an error and its instance is unknown (404) for a uniform ``durable_late_start_ms``, then starts
    durable_late_start_rate: float = 0.0
    durable_late_start_ms: tuple[float, float] = (0.0, 120_000.0)
    # the worker's threads for sync functions (PYTHON_THREADPOOL_THREAD_COUNT; ``LocalHost.worker_threads``): an
    # invocation of one waits for a thread once handed over. None: the run's app settings' count
    worker_threads: int | None = None
    # the async functions' pool for ``asyncio.to_thread`` (``LocalHost.blocking_threads``; the same setting sizes it,
    # ``dependencies.size_blocking_pool``). None: ``worker_threads``, or the run's app settings' count
    blocking_threads: int | None = None
    # host.json's ``maxConcurrentActivityFunctions`` (``DurableEngine.max_activities``). None: host.json's
    max_concurrent_activities: int | None = None

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """The profile in the JSON file ``path``: UTF-8, with or without the byte order mark Windows editors and
        PowerShell's ``Set-Content -Encoding UTF8`` write, or UTF-16 or UTF-32 with one (PowerShell 5's ``>``);
        whatever this machine's locale."""
        try:  # bytes: json detects the encoding, a BOM included; a key given twice is refused, not the last one kept
            data = json.loads(Path(path).read_bytes(), object_pairs_hook=each_name_once)
        except RepeatedName as exc:
            raise ProfileError(f"{path}: {exc}: say it once (json would keep the last one silently)") from None
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{path}: not JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ProfileError(f"{path}: not UTF-8 (or UTF-16, UTF-32) text: {exc}") from None
        except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits, brackets nested past the stack
            raise ProfileError(f"{path}: not JSON the runner reads: {exc}") from None
        return cls.parse(data)

    @classmethod
    def parse(cls, data: Any) -> Profile:
        data = _check_keys("profile", data, TOP_KEYS)
        agents: dict[str, AgentFaults] = {}
        for name, raw in _check_keys("agents", data.get("agents", {}), set(AGENTS)).items():
            entry = _check_keys(f"agents.{name}", raw, AGENT_KEYS)
            agents[name] = AgentFaults(**{k: _rate(f"agents.{name}.{k}", v) for k, v in entry.items()})
        services = {a.service for a in AGENTS.values()}
        remote: dict[str, dict[str, Any]] = {}
        for name, entry in _check_keys("remote", data.get("remote", {}), services).items():
            remote[name] = _remote(name, entry)
        cosmos = _check_keys("cosmos", data.get("cosmos", {}), COSMOS_KEYS)
        servicebus = _check_keys("servicebus", data.get("servicebus", {}), SERVICEBUS_KEYS)
        host = _check_keys("host", data.get("host", {}), HOST_KEYS)
        durable = _check_keys("durable", data.get("durable", {}), DURABLE_KEYS)
        orders = _check_keys("orders", data.get("orders", {}), ORDER_KEYS)
        restart = host.get("restart_every_s")
        if restart is not None and (not _number(restart) or not MIN_RESTART_EVERY_S <= restart <= MAX_SECONDS):
            raise ProfileError(
                f"host.restart_every_s must be a number of seconds from {MIN_RESTART_EVERY_S} to {MAX_SECONDS}, got "
                f"{restart!r} (each restart comes at its time: below {MIN_RESTART_EVERY_S} s, a run would spend its "
                "time restarting)"
            )
        skew: dict[str, float] = {}
        for name, offset in _check_keys("host.clock_skew_s", host.get("clock_skew_s", {}), set(CLOCK_HOSTS)).items():
            if not _number(offset) or abs(offset) > 3600:
                raise ProfileError(f"host.clock_skew_s.{name} must be seconds within ±3600, got {offset!r}")
            skew[name] = float(offset)

        def count(key: str, default: int) -> int:
            value = data.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 8:
                raise ProfileError(f"{key} must be an integer from 1 to 8, got {value!r}")
            return value

        return cls(
            agents=agents,
            remote=remote,
            cosmos_throttle_rate=_rate("cosmos.throttle_rate", cosmos.get("throttle_rate", 0)),
            cosmos_unavailable_rate=_rate("cosmos.unavailable_rate", cosmos.get("unavailable_rate", 0)),
            send_failure_rate=_rate("servicebus.send_failure_rate", servicebus.get("send_failure_rate", 0)),
            restart_every_s=float(restart) if restart is not None else None,
            cosmos_lost_response_rate=_rate("cosmos.lost_response_rate", cosmos.get("lost_response_rate", 0)),
            clock_skew_s=skew,
            supervisors=count("supervisors", 1),
            starters=count("starters", 1),
            orders=_order_mix(orders),
            reply_queues=count("reply_queues", 3),
            lock_expiry_rate=_rate("servicebus.lock_expiry_rate", servicebus.get("lock_expiry_rate", 0)),
            status_queues=_status_queues(data.get("status_queues", {}), count("reply_queues", 3)),
            max_pending=_max_pending(data.get("admission", {})),
            max_in_flight=_max_pending(data.get("admission", {}), "max_in_flight"),
            cosmos_latency_ms=_latency(cosmos.get("latency_ms")),
            cosmos_outages=_outages("cosmos.outages", cosmos.get("outages", []), "refused", False),
            cosmos_refusals=_outages("cosmos.outages", cosmos.get("outages", []), "refused", True),
            settle_latency_ms=_latency(servicebus.get("settle_latency_ms"), "servicebus.settle_latency_ms"),
            settings=_app_settings(data.get("settings", {})),
            operator=_operator(data["operator"]) if "operator" in data else None,
            activity_rerun_rate=_rate("host.activity_rerun_rate", host.get("activity_rerun_rate", 0)),
            last_try_crash_rate=_rate("host.last_try_crash_rate", host.get("last_try_crash_rate", 0)),
            cosmos_stale_read_rate=_rate("cosmos.stale_read_rate", cosmos.get("stale_read_rate", 0)),
            cosmos_stale_read_lag_ms=_lag(cosmos.get("stale_read_lag_ms", 1000)),
            cosmos_service_fault_rate=_rate("cosmos.service_fault_rate", cosmos.get("service_fault_rate", 0)),
            cosmos_partition_ranges=_ranges(cosmos.get("partition_ranges", 1)),
            durable_delivery_delay_rate=_rate("durable.delivery_delay_rate", durable.get("delivery_delay_rate", 0)),
            durable_delivery_delay_ms=_delivery_delay(durable.get("delivery_delay_ms", [0, 10_000])),
            durable_outages=_outages("durable.outages", durable.get("outages", []), "bare", False),
            durable_bare_outages=_outages("durable.outages", durable.get("outages", []), "bare", True),
            durable_late_start_rate=_rate("durable.late_start_rate", durable.get("late_start_rate", 0)),
            durable_late_start_ms=_delivery_delay(durable.get("late_start_ms", [0, 120_000]), "durable.late_start_ms"),
            worker_threads=_limit("host.worker_threads", host.get("worker_threads"), MAX_THREADS),
            blocking_threads=_limit("host.blocking_threads", host.get("blocking_threads"), MAX_THREADS),
            max_concurrent_activities=_limit(
                "durable.max_concurrent_activity_functions",
                durable.get("max_concurrent_activity_functions"),
                MAX_CONCURRENT_ACTIVITIES,
            ),
        )

    def agent(self, name: str) -> AgentFaults:
        return self.agents.get(name, AgentFaults())


def _limit(name: str, value: Any, most: int) -> int | None:
    """A pool's size or a concurrency limit: an integer from 1 to ``most``, or None when the profile names none."""
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most):
        raise ProfileError(f"{name} must be an integer from 1 to {most}, got {value!r}")
    return value


def _status_queues(data: Any, submitters: int) -> StatusQueues:
    section = _check_keys("status_queues", data, STATUS_QUEUE_KEYS)
    length = section.get("name_length")
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or not 20 <= length <= 260):
        raise ProfileError(f"status_queues.name_length must be an integer from 20 to 260, got {length!r}")
    refusing: list[StatusQueueRefusal] = []
    raw = section.get("refusing", [])
    if not isinstance(raw, list):
        raise ProfileError("status_queues.refusing must be a list")
    for n, item in enumerate(raw):
        where = f"status_queues.refusing[{n}]"
        entry = _check_keys(where, item, REFUSAL_KEYS)
        submitter = entry.get("submitter")
        if not isinstance(submitter, int) or isinstance(submitter, bool) or not 1 <= submitter <= submitters:
            raise ProfileError(f"{where}.submitter must be an integer from 1 to {submitters}, got {submitter!r}")
        error = entry.get("error")
        if error not in REFUSAL_ERRORS:
            raise ProfileError(f"{where}.error must be one of {', '.join(REFUSAL_ERRORS)}, got {error!r}")
        start = entry.get("start_s", 0)
        duration = entry.get("duration_s")
        if not _number(start) or not 0 <= start <= MAX_SECONDS:
            raise ProfileError(f"{where}.start_s must be a number of seconds from 0 to {MAX_SECONDS}, got {start!r}")
        if duration is not None and (not _number(duration) or not 0 < duration <= MAX_SECONDS):
            raise ProfileError(
                f"{where}.duration_s must be a positive number of seconds up to {MAX_SECONDS}, got {duration!r}"
            )
        refusing.append(
            StatusQueueRefusal(submitter, str(error), float(start), float(duration) if duration is not None else None)
        )
    return StatusQueues(length, tuple(refusing))


def _outages(where: str, data: Any, flag: str | None = None, flagged: bool = False) -> tuple[tuple[float, float], ...]:
    """``[{"start_s": s, "duration_s": d}, ...]``: windows in seconds from the run's start. ``flag``: a key a window
    may set true (Cosmos DB's ``refused``: a refusal of the app's identity, not a 503; the Durable extension's
    ``bare``: a 500 without a body), and the windows returned are those whose ``flag`` is ``flagged``; None: no such
    key."""
    if not isinstance(data, list):
        raise ProfileError(f"{where} must be a list")
    windows: list[tuple[float, float]] = []
    for n, item in enumerate(data):
        entry = _check_keys(f"{where}[{n}]", item, OUTAGE_KEYS if flag is None else OUTAGE_KEYS | {flag})
        start, duration = entry.get("start_s"), entry.get("duration_s")
        if not _number(start) or not 0 <= start <= MAX_SECONDS:
            raise ProfileError(
                f"{where}[{n}].start_s must be a number of seconds from 0 to {MAX_SECONDS}, got {start!r}"
            )
        if not _number(duration) or not 0 < duration <= MAX_SECONDS:
            raise ProfileError(
                f"{where}[{n}].duration_s must be a positive number of seconds up to {MAX_SECONDS}, got {duration!r}"
            )
        if flag is None:
            windows.append((float(start), float(duration)))
            continue
        if not isinstance(entry.get(flag, False), bool):
            raise ProfileError(f"{where}[{n}].{flag} must be true or false, got {entry.get(flag)!r}")
        if entry.get(flag, False) is flagged:
            windows.append((float(start), float(duration)))
    return tuple(windows)


def _remote(service: str, data: Any) -> dict[str, Any]:
    """``remote.<service>``, checked here as every other section is (the simulator reads it only once the run
    has started, where a bad value would end it with a traceback instead of exit code 2)."""
    where = f"remote.{service}"
    entry = dict(_check_keys(where, data, REMOTE_KEYS))
    for key in ("transient_error_rate", "permanent_error_rate", "response_loss_rate", "slow_call_rate"):
        if key in entry:
            _rate(f"{where}.{key}", entry[key])
    for key in ("latency_ms", "slow_latency_ms"):
        value = entry.get(key)
        ok = isinstance(value, list) and len(value) == 2 and all(_number(v) for v in value)
        # at most MAX_SECONDS, as every other time a profile names: 1e300 ms was an OverflowError in each call
        if value is not None and (not ok or not 0 <= value[0] <= value[1] <= MAX_SECONDS * 1000):
            raise ProfileError(
                f"{where}.{key} must be [lo, hi] milliseconds, 0 <= lo <= hi <= {MAX_SECONDS * 1000}, got {value!r}"
            )
    _outages(f"{where}.outages", entry.get("outages", []))
    if entry.get("transient_error_rate", 0) + entry.get("permanent_error_rate", 0) > 1:
        raise ProfileError(f"{where}: transient_error_rate + permanent_error_rate must not exceed 1")
    return entry


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _max_pending(data: Any, key: str = "max_pending") -> int | None:
    value = _check_keys("admission", data, ADMISSION_KEYS).get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ProfileError(f"admission.{key} must be a positive integer, got {value!r}")
    return value


def _order_mix(orders: dict[str, Any]) -> OrderMix:
    """``orders``: the rates of the workload mix, and ``late_notification_s`` (``[lo, hi]`` seconds)."""
    fields: dict[str, Any] = {k: _rate(f"orders.{k}", v) for k, v in orders.items() if k != "late_notification_s"}
    late = orders.get("late_notification_s")
    if late is not None:
        ok = isinstance(late, list) and len(late) == 2 and all(_number(v) for v in late)
        if not ok or not 0 <= late[0] <= late[1] <= 86_400:
            raise ProfileError(
                f"orders.late_notification_s must be [lo, hi] seconds, 0 <= lo <= hi <= 86400, got {late!r}"
            )
        fields["late_notification_s"] = (float(late[0]), float(late[1]))
    return OrderMix(**fields)


def _operator(data: Any) -> OperatorPlan:
    """``operator``: who acts, how often and how soon (``OperatorPlan``)."""
    section = _check_keys("operator", data, OPERATOR_KEYS)
    resubmit = _rate("operator.resubmit_rate", section.get("resubmit_rate", 0))
    compensate = _rate("operator.compensate_rate", section.get("compensate_rate", 0))
    if resubmit + compensate > 1 + 1e-9:  # (rates written with two decimals may add up to 1.0000000000000002)
        raise ProfileError("operator: resubmit_rate + compensate_rate must not exceed 1 (one action per Error)")
    answer = section.get("answer_reviews")
    if answer is not None and answer not in OPERATOR_REVIEW_ANSWERS:
        raise ProfileError(
            f"operator.answer_reviews must be one of {', '.join(OPERATOR_REVIEW_ANSWERS)} or null, got {answer!r}"
        )
    after = _seconds_span("operator.after_s", section.get("after_s", [60, 600]))
    most = section.get("max_actions_per_order", 3)
    if not isinstance(most, int) or isinstance(most, bool) or not 1 <= most <= 10:
        raise ProfileError(f"operator.max_actions_per_order must be an integer from 1 to 10, got {most!r}")
    cancel = _rate("operator.cancel_rate", section.get("cancel_rate", 0))
    cancel_after = _seconds_span("operator.cancel_after_s", section.get("cancel_after_s", [0, 300]))
    discard = section.get("discard_orderless", False)
    if not isinstance(discard, bool):
        raise ProfileError(f"operator.discard_orderless must be true or false, got {discard!r}")
    return OperatorPlan(resubmit, compensate, answer, after, most, cancel, cancel_after, discard)


def _seconds_span(where: str, value: Any) -> tuple[float, float]:
    """``[lo, hi]`` simulated seconds, 0 <= lo <= hi <= a day."""
    ok = isinstance(value, list) and len(value) == 2 and all(_number(v) for v in value)
    if not ok or not 0 <= value[0] <= value[1] <= 86_400:
        raise ProfileError(f"{where} must be [lo, hi] seconds, 0 <= lo <= hi <= 86400, got {value!r}")
    return (float(value[0]), float(value[1]))


def _latency(value: Any, where: str = "cosmos.latency_ms") -> tuple[float, float] | None:
    if value is None:
        return None
    ok = isinstance(value, list) and len(value) == 2 and all(_number(v) for v in value)
    if not ok or not 0 <= value[0] <= value[1] <= 10_000:
        raise ProfileError(f"{where} must be [lo, hi] milliseconds, 0 <= lo <= hi <= 10000, got {value!r}")
    return float(value[0]), float(value[1])


def _lag(value: Any) -> float:
    """``cosmos.stale_read_lag_ms``: how long after a write another instance may still read the version before."""
    if not _number(value) or not 0 < value <= 60_000:
        raise ProfileError(f"cosmos.stale_read_lag_ms must be milliseconds, 0 < lag <= 60000, got {value!r}")
    return float(value)


def _ranges(value: Any) -> int:
    """``cosmos.partition_ranges``: how many physical partition key ranges a container is split into, 1 to 8."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 8:
        raise ProfileError(f"cosmos.partition_ranges must be an integer from 1 to 8, got {value!r}")
    return value


def _delivery_delay(value: Any, name: str = "durable.delivery_delay_ms") -> tuple[float, float]:
    """``name`` (``durable.delivery_delay_ms``): ``[lo, hi]`` ms, 0 <= lo <= hi <= ``DELIVERY_DELAY_MAX_MS``."""
    ok = isinstance(value, list) and len(value) == 2 and all(_number(v) for v in value)
    if not ok or not 0 <= value[0] <= value[1] <= DELIVERY_DELAY_MAX_MS:
        raise ProfileError(
            f"{name} must be [lo, hi] milliseconds, 0 <= lo <= hi <= {DELIVERY_DELAY_MAX_MS}, got {value!r}"
        )
    return (float(value[0]), float(value[1]))


def _app_settings(data: Any) -> dict[str, str]:
    """``settings``: app settings (names from ``settings.SETTINGS``) this profile runs with, as strings."""
    from settings import SETTINGS, Settings, SettingsError

    entries = _check_keys("settings", data, {s.name for s in SETTINGS})
    for name, value in entries.items():
        if not isinstance(value, str):
            raise ProfileError(f"settings.{name} must be a string (as in local.settings.json), got {value!r}")
    for name, value in entries.items():
        if name.endswith("_SERVICE_URL") and value.strip():
            # the simulation's remote services are the built-in simulators (remote.<service> shapes them): a real
            # service would be called from simulated time, and its calls would bypass the runner's evidence
            raise ProfileError(f"settings.{name}: the local runner simulates every remote service; leave it empty")
    try:
        Settings.from_env({}, **entries)
    except SettingsError as error:
        raise ProfileError(f"settings: {error}") from None
    return dict(entries)
