"""The local stand-in for the Functions host. It plays only the host's part; the app runs in the real
Functions Python runtime (``azure-functions-runtime``, see ``localrun.worker``), which indexed it and
receives every invocation with the host's wire types:

- Service Bus triggers: each message the in-process broker delivers is encoded as the Service Bus
  extension encodes it (``model_binding_data``: lock token + AMQP message), and settlement goes
  through the extension's own ``ServiceBusMessageActions`` over gRPC to a settlement server here;
- timer triggers fire on their NCRONTAB schedule, read from the binding after ``%NAME%`` resolution;
- orchestrations and activities are invoked by the Durable engine with the context / input JSON;
- a ``durableClient`` binding receives the extension's client settings, and the SDK's real client
  calls the engine over HTTP on loopback (``localrun.durable.http_api``);
- HTTP triggers: a request (``submit_http`` from any thread, ``call_http`` from the thread driving the
  simulation) is matched to a function's route and sent as ``RpcHttp``; the ``$return`` http output is
  the answer (``localrun.worker.http``). The invocation is a task like any other, so its blocking work
  may sleep on the simulated clock.

``%NAME%`` resolves only from the app settings the host was given; a function whose bindings do not
resolve is in error and never runs, as in the host (``load_errors``). Every invocation is a task on the
virtual-time scheduler, so invocations overlap in simulated time (up to ``maxConcurrentCalls`` per
queue, from host.json). While a Service Bus-triggered invocation runs, the host renews its message's lock
as the Service Bus extension's processor does (``LockRenewals``), up to host.json's
``maxAutoLockRenewalDuration`` from receipt. An invocation still running at host.json's ``functionTimeout`` fails,
and the host restarts the worker process running it, failing every invocation in flight on it (``_time_out``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import queue as queue_module
from array import array
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from localrun import hostile
from localrun.durable import fast_timestamps, sdk_speedups
from localrun.durable.engine import RUNNING_ACTIVITY, DurableEngine
from localrun.durable.http_api import DurableExtensionApi
from localrun.durable.work import ActivityWork
from localrun.ncrontab import Schedule
from localrun.prices import ActivityPeriods, scaling_group
from localrun.servicebus import InProcessBroker, MessageLockLost
from localrun.servicebus.settlement_server import (
    SettlementServer,
    install_message_actions,
    settle_round_trip,
    uninstall_message_actions,
)
from localrun.servicebus.wire import to_typed_data, trigger_metadata_typed
from localrun.virtual_time import Task, TaskCancelled, TaskScheduler
from localrun.worker import wire
from localrun.worker.bindings import BindingError, resolve_binding
from localrun.worker.http import (
    HttpAnswer,
    HttpRequestData,
    RouteTemplate,
    answer_from,
    methods_of,
    request_typed_data,
    route_of,
)
from localrun.worker.process import FunctionsWorker, IndexedFunction, InvocationFailed

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class HostedFunction:
    """A function the host started: what the runtime indexed, and its trigger after ``%NAME%``."""

    indexed: IndexedFunction
    trigger: dict[str, Any]
    client_arg: str | None  # the ``durableClient`` binding's name, if it has one

    @property
    def name(self) -> str:
        return self.indexed.name

    @property
    def trigger_type(self) -> str:
        return str(self.trigger["type"])

    @property
    def scaling_group(self) -> str:
        """Its Flex Consumption scaling group (``localrun.prices.scaling_group``)."""
        return scaling_group(self.name, self.trigger_type)


@dataclass
class TimerSpec:
    function: HostedFunction
    schedule: Schedule
    next_fire: datetime
    last_fire: datetime | None = None
    copy: int = 0
    running: bool = False  # the host starts no new run of a timer while its previous run is going
    past_due: bool = False  # its next run is one a restart killed (the schedule monitor's IsPastDue)


@dataclass(frozen=True)
class _Running:
    """An invocation in flight: its function, when it started, and the activity work item it runs, if any."""

    function: str
    started: datetime
    activity: ActivityWork | None


class FunctionTimeout(Exception):
    """The host's ``FunctionTimeoutException``: the invocation ran past host.json's ``functionTimeout``."""


def host_json() -> dict[str, Any]:
    path = ROOT / "host.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def timespan(text: str) -> timedelta:
    """A host.json TimeSpan (``[d.]hh:mm:ss[.fffffff]``), e.g. ``maxAutoLockRenewalDuration``."""
    hours, minutes, seconds = text.split(":")
    days, _, hours = hours.rpartition(".")
    return timedelta(days=int(days or 0), hours=int(hours), minutes=int(minutes), seconds=float(seconds))


# The processor renews a lock this long before it runs out, or half the time left if that is less
# (Azure.Messaging.ServiceBus ``ReceiverManager.CalculateRenewDelay``, ``Constants.MaximumRenewBufferDuration``).
RENEW_BUFFER = timedelta(seconds=10)


@dataclass
class _Renewal:
    """The renewal of one invocation's message lock: until ``until`` (receipt + maxAutoLockRenewalDuration)."""

    function: str
    sequence_number: int
    until: datetime
    next_at: datetime
    failing: bool = False  # the invocation stalled (``hostile.LockStalls``): the next renewal fails


class LockRenewals:
    """The Service Bus extension's automatic lock renewal: the SDK processor behind the trigger renews
    the lock of each message whose invocation runs, ``RENEW_BUFFER`` before it runs out, until the
    invocation ends or ``maxAutoLockRenewalDuration`` from receipt has passed (then the lock runs out
    and the message is delivered again). A renewal that fails is logged and not tried again: the lock
    then expires (here only ``servicebus.lock_expiry_rate``'s stall fails one). Driven in virtual time by
    the host's loop (``due``, ``renew_due``)."""

    def __init__(self, broker: InProcessBroker, window: timedelta) -> None:
        self._broker = broker
        self.window = window
        self._held: dict[str, _Renewal] = {}
        self.failed = 0

    def start(self, function: str, message: Any, now: datetime) -> None:
        if self.window <= timedelta(0):
            return
        token = str(message.lock_token)
        self._held[token] = _Renewal(function, message.sequence_number, now + self.window, now)
        self._held[token].next_at = self._next(message.locked_until_utc, now)

    def stop(self, token: str) -> None:
        self._held.pop(token, None)

    def stall(self, token: str) -> None:
        """The invocation's host stalls: its lock is not renewed any more (``servicebus.lock_expiry_rate``)."""
        if token in self._held:
            self._held[token].failing = True

    def clear(self) -> None:
        """A host restart: nothing renews the locks of the invocations that died with it."""
        self._held.clear()

    def due(self) -> datetime | None:
        return min((r.next_at for r in self._held.values()), default=None)

    def renew_due(self, now: datetime) -> None:
        for token, renewal in list(self._held.items()):
            if renewal.next_at > now:
                continue
            if now >= renewal.until:  # maxAutoLockRenewalDuration has passed: no more renewals
                del self._held[token]
                continue
            if renewal.failing:
                del self._held[token]
                self.failed += 1
                log.warning(
                    "Lock renewal of message %s for '%s' failed: the host stalled past it; the lock will expire",
                    renewal.sequence_number,
                    renewal.function,
                    extra={"event": "LockRenewalFailed", "function": renewal.function},
                )
                continue
            try:
                locked_until = self._broker.renew_lock(token)
            except MessageLockLost:  # settled by the invocation, which has not returned yet: nothing to renew
                del self._held[token]
                continue
            renewal.next_at = self._next(locked_until, now)

    @staticmethod
    def _next(locked_until: datetime, now: datetime) -> datetime:
        return locked_until - min((locked_until - now) / 2, RENEW_BUFFER)


def local_settings_example() -> dict[str, str]:
    """The ``Values`` of ``local.settings.json.example``: what a developer's ``local.settings.json``
    starts as, and the app settings a local run gets unless it says otherwise."""
    values = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    return {str(k): str(v) for k, v in values.items()}


def worker_thread_count(app_settings: Mapping[str, str]) -> int | None:
    """``PYTHON_THREADPOOL_THREAD_COUNT`` as azure_functions_runtime reads it (``utils.threadpool``: ``int()`` of the
    text, at least 1; any other value, or none, leaves the pool at its default); None when it does not set one."""
    try:
        count = int(app_settings.get("PYTHON_THREADPOOL_THREAD_COUNT", ""))
    except ValueError:
        return None
    return count if count >= 1 else None


# The Durable extension's ``maxConcurrentActivityFunctions`` when host.json names none: 10 on the Consumption plan,
# else 10 x the processors (azure-functions-durable-extension ``AzureStorageDurabilityProviderFactory``), 10 either
# way on the one core of a 2,048 MB Flex Consumption instance.
DEFAULT_MAX_CONCURRENT_ACTIVITIES = 10


def max_concurrent_activities(host: Mapping[str, Any]) -> int:
    """host.json's ``extensions.durableTask.maxConcurrentActivityFunctions`` (``host``: host.json's content), or the
    extension's default."""
    value = host.get("extensions", {}).get("durableTask", {}).get("maxConcurrentActivityFunctions")
    return DEFAULT_MAX_CONCURRENT_ACTIVITIES if value is None else int(value)


class LocalHost:
    def __init__(
        self,
        scheduler: TaskScheduler,
        broker: InProcessBroker,
        app_settings: Mapping[str, str],
        *,
        timer_copies: dict[str, int] | None = None,
        sdk_speed_ups: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.clock = scheduler.clock
        self.broker = broker
        self.app_settings = dict(app_settings)
        self.worker = FunctionsWorker.get()
        self.protos = self.worker.protos
        self.functions: dict[str, HostedFunction] = {}
        self.load_errors: dict[str, str] = {}
        for indexed in self.worker.functions.values():
            self._start_function(indexed)
        self.queues = {
            f.trigger["queueName"]: f for f in self.functions.values() if f.trigger_type == "serviceBusTrigger"
        }
        self.activities = {
            f.trigger.get("activity") or f.name: f
            for f in self.functions.values()
            if f.trigger_type == "activityTrigger"
        }
        orchestrators = {
            f.trigger.get("orchestration") or f.name: self._orchestrator(f)
            for f in self.functions.values()
            if f.trigger_type == "orchestrationTrigger"
        }
        # Off by default: the SDK runs exactly as shipped. ``python3 dev.py bench`` says which it measured.
        self.sdk_speed_ups = sdk_speed_ups
        self.lock_stalls: hostile.LockStalls | None = None
        if sdk_speed_ups:
            fast_timestamps.install()
            sdk_speedups.install()
        self.engine = DurableEngine(orchestrators, self._run_activity, self.clock)
        # host.json's maxConcurrentActivityFunctions: the extension dispatches no more activity work items at once
        # (``DurableEngine.max_activities``). Profile ``durable.max_concurrent_activity_functions`` overrides it.
        self.engine.max_activities = max_concurrent_activities(host_json())
        self.durable_api = DurableExtensionApi(self.engine, task_hub=self._task_hub())
        self.durable_api.start()
        self._client_data = wire.durable_client(self.protos, self.durable_api.client_binding_json())
        self.settlement = SettlementServer(broker)
        self._message_actions = install_message_actions(self.settlement.start())
        self._incarnation = 0  # bumped by restart(): an invocation of an earlier one died with its host
        now = self.clock.now()
        self.timers: list[TimerSpec] = []
        for f in list(self.functions.values()):
            if f.trigger_type != "timerTrigger":
                continue
            try:
                schedule = Schedule.parse(f.trigger["schedule"])
            except ValueError as exc:  # the host puts that one function in error, not the whole app
                self._in_error(f.name, f"the schedule {f.trigger['schedule']!r} is not valid NCRONTAB: {exc}")
                del self.functions[f.name]
                continue
            for copy in range((timer_copies or {}).get(f.name, 1)):
                self.timers.append(TimerSpec(f, schedule, schedule.next_after(now), copy=copy))
        service_bus = host_json().get("extensions", {}).get("serviceBus", {})
        self.concurrency = int(service_bus.get("maxConcurrentCalls", 16))
        self.lock_renewals = LockRenewals(
            broker, timespan(str(service_bus.get("maxAutoLockRenewalDuration", "00:05:00")))
        )
        # Flex Consumption's default when host.json names none (functions-scale, "Function app timeout duration")
        self.function_timeout = timespan(str(host_json().get("functionTimeout", "00:30:00")))
        self._running: dict[Task, _Running] = {}
        self.function_timeouts = 0  # invocations that ran past functionTimeout (each restarted the worker)
        # called after a worker restart (a function timeout): the process's memory is gone (the runner keeps the
        # Python objects, as on a host restart, so the simulation empties what the app keeps between invocations)
        self.on_worker_restart: Callable[[], None] | None = None
        # The worker's threads for sync functions (``PYTHON_THREADPOOL_THREAD_COUNT``; the runtime's default is
        # ``ThreadPoolExecutor``'s, min(32, cores + 4)): an invocation of a sync function waits for one once the host
        # handed it over, its lock renewal and its functionTimeout running meanwhile. The app settings' value, as the
        # worker reads it; None (not set, or not a count the worker takes): no limit. Profile ``host.worker_threads``
        # overrides it.
        self.worker_threads: int | None = worker_thread_count(self.app_settings)
        self._threads_busy = 0
        self._thread_waiters: deque[Task] = deque()
        self.thread_waits = 0  # invocations that waited for a thread
        self.threads_peak = 0  # the most sync invocations on the worker's threads at once
        # The async functions' pool for blocking work: the event loop's default executor, where ``asyncio.to_thread``
        # runs, which ``dependencies.size_blocking_pool`` gives the same ``PYTHON_THREADPOOL_THREAD_COUNT`` threads (a
        # pool of its own). Each call of an async invocation's blocking work waits for one of its threads, in arrival
        # order, its invocation's lock renewal and functionTimeout running meanwhile. None: no limit. Profile
        # ``host.blocking_threads`` overrides it (and ``host.worker_threads`` sets both, as the setting does).
        self.blocking_threads: int | None = self.worker_threads
        self._blocking_busy = 0
        self._blocking_waiters: deque[Task] = deque()
        self.blocking_waits = 0  # blocking calls of async invocations that waited for a thread
        self.blocking_peak = 0  # the most blocking calls running at once
        self.in_flight: dict[str, int] = dict.fromkeys(self.queues, 0)
        self._engine_waiting = 0
        self.executions: dict[str, int] = {}
        self.invocation_requests = 0  # InvocationRequests this host sent to the runtime
        # simulated duration of each invocation (an array: 8 bytes each, ~50 per order)
        self.execution_seconds: array[float] = array("d")
        # each scaling group's activity periods, folded as invocations start and end (constant memory per group), in
        # simulated seconds from the host's start
        self.activity_periods = ActivityPeriods()
        self.started_at = self.clock.now()
        self.on_invoke: Callable[[HostedFunction], None] | None = None
        prefix = str(host_json().get("extensions", {}).get("http", {}).get("routePrefix", "api"))
        self.http_routes = sorted(
            (
                (f, RouteTemplate(prefix, route_of(f.trigger, f.name)))
                for f in self.functions.values()
                if f.trigger_type == "httpTrigger"
            ),
            key=lambda pair: -pair[1].literals,
        )
        self._http_inbox: queue_module.SimpleQueue[tuple[HttpRequestData, concurrent.futures.Future[HttpAnswer]]] = (
            queue_module.SimpleQueue()
        )
        self.http_requests = 0  # HTTP requests answered by an invocation
        # what a dropped invocation that never began still owes: an HTTP request its answer, a Service Bus
        # message its abandonment (after a worker restart) and the end of its lock's renewal
        self._unanswered: set[concurrent.futures.Future[HttpAnswer]] = set()
        self._undelivered: dict[str, Any] = {}  # lock token -> message, from its delivery until its invocation ends

    def _start_function(self, indexed: IndexedFunction) -> None:
        try:
            bindings = [resolve_binding(b, self.app_settings) for b in indexed.bindings]
        except BindingError as exc:
            self._in_error(indexed.name, str(exc))
            return
        trigger = next(b for b in bindings if b["type"].endswith("Trigger"))
        client = next((b["name"] for b in bindings if b["type"] == "durableClient"), None)
        self.functions[indexed.name] = HostedFunction(indexed, trigger, client)

    def _in_error(self, name: str, why: str) -> None:
        self.load_errors[name] = why
        log.error("The '%s' function is in error: %s", name, why, extra={"event": "FunctionInError", "function": name})

    def _task_hub(self) -> str:
        durable = host_json().get("extensions", {}).get("durableTask", {})
        return str(durable.get("hubName", "TestHubName"))

    def close(self) -> None:
        """Stops the endpoints this host served (the worker and its event loop live on with the process)."""
        self.durable_api.close()
        uninstall_message_actions(self._message_actions)
        self.settlement.stop()

    # --- invocations ------------------------------------------------------------------------------

    def _invoke(
        self, function: HostedFunction, inputs: dict[str, Any], metadata: Mapping[str, Any] | None = None
    ) -> Any:
        self.executions[function.name] = self.executions.get(function.name, 0) + 1
        task = self.scheduler.current()
        if task is not None:  # the host times it out at functionTimeout (``_time_out``)
            self._running[task] = _Running(function.name, self.clock.now(), RUNNING_ACTIVITY.get())
        threaded = False
        try:
            threaded = self._take_thread(function)
            if self.on_invoke is not None:
                self.on_invoke(function)
            if function.client_arg is not None:
                inputs[function.client_arg] = self._client_data
            self.invocation_requests += 1
            started = self.clock.now()
            group = function.scaling_group
            self.activity_periods.start(group, (started - self.started_at).total_seconds())
            try:
                run_job = self._run_blocking if function.indexed.is_async else None
                return self.worker.invoke(function.indexed, inputs, metadata, run_job=run_job)
            finally:
                # simulated seconds the invocation ran (what a Flex instance would bill, localrun/prices.py); a
                # cancelled invocation (host restart, function timeout) ends here too, when it is dropped
                ended = self.clock.now()
                self.execution_seconds.append((ended - started).total_seconds())
                self.activity_periods.end(group, (ended - self.started_at).total_seconds())
        finally:
            if threaded and not self.scheduler.wake_first(self._thread_waiters):  # else handed to the first waiting
                self._threads_busy -= 1
            if task is not None:
                self._running.pop(task, None)

    def _take_thread(self, function: HostedFunction) -> bool:
        """A thread of the worker's pool for an invocation of a sync function (``worker_threads``), waited for in
        arrival order; True when it took one. Orchestrator episodes take none here (they run in no simulated time)."""
        if function.indexed.is_async or function.trigger_type == "orchestrationTrigger":
            return False
        if self.worker_threads is None or self._threads_busy < self.worker_threads:
            self._threads_busy += 1
        else:  # in arrival order: the thread an invocation frees is handed to the first one waiting
            self.thread_waits += 1
            self.scheduler.wait_current(self._thread_waiters)
        self.threads_peak = max(self.threads_peak, self._threads_busy)
        return True

    def _run_blocking(self, job: Callable[[], None]) -> None:
        """One call an async invocation handed ``asyncio.to_thread`` (the loop's default executor), on a thread of the
        blocking pool (``blocking_threads``), waited for in arrival order."""
        if self.blocking_threads is not None and self._blocking_busy >= self.blocking_threads:
            self.blocking_waits += 1
            self.scheduler.wait_current(self._blocking_waiters)  # the thread a call frees is handed to the first
        else:
            self._blocking_busy += 1
        self.blocking_peak = max(self.blocking_peak, self._blocking_busy)
        try:
            job()
        finally:
            if not self.scheduler.wake_first(self._blocking_waiters):
                self._blocking_busy -= 1

    def _orchestrator(self, function: HostedFunction) -> Callable[[str], str]:
        def run_episode(context_json: str) -> str:
            try:
                data = self._invoke(
                    function, {function.trigger["name"]: wire.orchestration_context(self.protos, context_json)}
                )
            except InvocationFailed as failure:
                # The SDK reports an orchestrator's own failure inside the message ($OutOfProcData$).
                raise RuntimeError(str(failure)) from None
            return wire.return_text(data) or ""

        return run_episode

    def _run_activity(self, name: str, value: Any) -> Any:
        function = self.activities.get(name)
        if function is None:
            raise RuntimeError(f"no activity function named {name!r}")
        data = wire.activity_input(self.protos, json.dumps(value))
        text = wire.return_text(self._invoke(function, {function.trigger["name"]: data}))
        return None if text is None else json.loads(text)

    def _deliver(self, queue: str, message: Any) -> None:
        function = self.queues[queue]

        incarnation = self._incarnation
        token = str(message.lock_token)
        renewals = self.lock_renewals

        def invoke() -> None:
            # A failed invocation (InvocationFailed) is the task's failure, counted in the report; the host
            # abandons its message, unless it was settled or its lock lost (_abandon_after_failure).
            try:
                inputs = {function.trigger["name"]: to_typed_data(message, self.protos)}
                if self.lock_stalls is not None:  # profile servicebus.lock_expiry_rate, settle_latency_ms
                    stall, round_trip = self.lock_stalls.plan()
                    hostile.stall_after_work.set(_stalling(stall, lambda: renewals.stall(token)))
                    settle_round_trip.set(round_trip)
                with self.settlement.invocation(message.lock_token):
                    self._invoke(function, inputs, trigger_metadata_typed(message, self.protos))
            except (InvocationFailed, TaskCancelled):
                # not an invocation a host restart killed: a failure, or a worker restart after a function timeout
                if incarnation == self._incarnation:
                    self._abandon_after_failure(message)
                raise
            finally:
                renewals.stop(token)
                self._undelivered.pop(token, None)
                self.in_flight[queue] -= 1

        self.in_flight[queue] += 1
        self._undelivered[token] = message
        renewals.start(function.name, message, self.clock.now())
        self.scheduler.spawn(f"{function.name}#{message.sequence_number}", invoke)

    def _abandon_after_failure(self, message: Any) -> None:
        """What the host does with the message of a failed Service Bus-triggered invocation, whatever
        ``autoCompleteMessages`` says: the extension rethrows the function's failure
        (``MessageProcessor.CompleteProcessingMessageAsync``) and the SDK's processor abandons the message
        unless it was settled or its lock lost (Azure.Messaging.ServiceBus ``ReceiverManager``: "if the user
        settled the message, or if the message or session lock was lost, do not attempt to abandon the
        message"); "calls Abandon if the function fails" (functions-bindings-service-bus-trigger, PeekLock
        behavior). It is available again at once, delivery count + 1, not after its lock runs out."""
        with contextlib.suppress(MessageLockLost):  # settled by the function, or its lock lost
            self.broker.settle_lock(str(message.lock_token), "abandon")

    def _timeout_due(self) -> datetime | None:
        """When the oldest invocation in flight reaches ``functionTimeout``."""
        oldest = min((r.started for r in self._running.values()), default=None)
        return None if oldest is None else oldest + self.function_timeout

    def _time_out(self, running: _Running) -> None:
        """An invocation ran past ``functionTimeout``: the host cancels it and restarts the worker process running
        it (azure-functions-host ``WebScriptHostExceptionHandler.OnTimeoutExceptionAsync``: "A function timeout has
        occurred. Restarting worker process executing invocationId", ``RestartWorkerWithInvocationIdAsync``), so
        every invocation in flight on that worker fails with it; the host and its listeners go on. The runner has
        one worker. What becomes of each: a Service Bus message is abandoned by the SDK's processor unless it was
        settled or its lock lost (``_abandon_after_failure``), so it is delivered again at once; an activity fails
        to its orchestration (``DurableEngine.restart_worker``); a timer's run ends failed, and the schedule
        monitor records it as it records any run that returns (``TimerListener``: ``UpdateStatusAsync`` after
        ``TryExecuteAsync``), so the next occurrence comes as scheduled, not past due; an HTTP request gets no
        answer from the function (503 here). The process's memory is lost (``on_worker_restart``)."""
        self.function_timeouts += 1
        reason = f"Timeout value of {self.function_timeout} exceeded by function '{running.function}'"
        log.error(
            "%s: the host restarts the worker process, failing every invocation in flight on it",
            reason,
            extra={"event": "FunctionTimedOut", "function": running.function},
        )
        self._running.clear()
        self.scheduler.failures.append((running.function, FunctionTimeout(reason)))
        self.scheduler.cancel_all()
        for token, message in self._undelivered.items():  # sent to the worker, dropped before it began: failed too
            self.lock_renewals.stop(token)
            self._abandon_after_failure(message)
        self._dropped_unstarted()
        self.engine.restart_worker(running.activity, reason)
        self.in_flight = dict.fromkeys(self.queues, 0)
        self._engine_waiting = 0
        for timer in self.timers:
            timer.running = False
        if self.on_worker_restart is not None:
            self.on_worker_restart()

    def _dropped_unstarted(self) -> None:
        """After ``cancel_all``: the HTTP requests whose invocation was dropped before it began get the 503 the
        others got, no message is left counted as delivered, and the worker's threads are all free."""
        self._threads_busy = 0
        self._thread_waiters.clear()
        self._blocking_busy = 0
        self._blocking_waiters.clear()
        for future in self._unanswered:
            if not future.done():
                future.set_result(HttpAnswer(503, {}, b""))
        self._unanswered.clear()
        self._undelivered.clear()

    def _fire_timer(self, timer: TimerSpec, past_due: bool = False) -> None:
        function = timer.function
        data = wire.timer_data(self.protos, last=timer.last_fire, next_fire=timer.next_fire, past_due=past_due)

        def invoke() -> None:
            try:
                self._invoke(function, {function.trigger["name"]: data})
            finally:
                timer.running = False

        timer.running = True
        self.scheduler.spawn(f"{function.name}@{self.clock.now().isoformat()}#{timer.copy}", invoke)

    def match_http(self, method: str, path: str) -> tuple[HostedFunction, dict[str, str]] | None:
        """The HTTP function whose route and methods take this request, and its route parameters."""
        for function, template in self.http_routes:
            params = template.match(path)
            if params is not None and method.upper() in methods_of(function.trigger):
                return function, params
        return None

    def submit_http(self, request: HttpRequestData) -> concurrent.futures.Future[HttpAnswer]:
        """Hands a request to the simulation (safe from any thread): the next ``pump`` starts its
        invocation as a task. The future gets the answer (404 without a matching route, 500 when
        the invocation failed, 503 when a host restart dropped it)."""
        future: concurrent.futures.Future[HttpAnswer] = concurrent.futures.Future()
        self._http_inbox.put((request, future))
        return future

    def call_http(self, request: HttpRequestData) -> HttpAnswer:
        """``submit_http`` from the thread that drives the simulation: runs it until answered."""
        future = self.submit_http(request)
        while not future.done():
            self.pump()
            if future.done() or self.scheduler.run_one():
                continue
            due = self.next_due()
            if due is None:
                raise RuntimeError(f"{request.method} {request.url}: nothing left to run and no answer")
            self.clock.advance_to(due)
        return future.result()

    def _start_http(self, request: HttpRequestData, future: concurrent.futures.Future[HttpAnswer]) -> None:
        path = urlsplit(request.url).path
        matched = self.match_http(request.method, path)
        if matched is None:
            future.set_result(HttpAnswer(404, {}, b""))
            return
        function, params = matched

        def invoke() -> None:
            answer = HttpAnswer(503, {}, b"")
            try:
                inputs = {function.trigger["name"]: request_typed_data(self.protos, request, params)}
                answer = answer_from(self._invoke(function, inputs))
            except InvocationFailed as failure:
                log.error("%s %s failed: %s", request.method, path, failure)
                answer = HttpAnswer(500, {}, b"")
                raise
            finally:
                self.http_requests += 1
                self._unanswered.discard(future)
                future.set_result(answer)

        self._unanswered.add(future)
        self.scheduler.spawn(f"{function.name}@{self.clock.now().isoformat()}", invoke)

    def _engine_step(self) -> None:
        def step() -> None:
            self._engine_waiting -= 1
            self.engine.run_next()

        self._engine_waiting += 1
        self.scheduler.spawn("durable", step)

    # --- the loop -----------------------------------------------------------------------------------

    def pump(self) -> None:
        """Starts every invocation that is due now (after timing out one past ``functionTimeout``)."""
        now = self.clock.now()
        overdue = [r for r in self._running.values() if r.started + self.function_timeout <= now]
        if overdue:
            self._time_out(min(overdue, key=lambda r: r.started))
        while True:
            try:
                request, future = self._http_inbox.get_nowait()
            except queue_module.Empty:
                break
            self._start_http(request, future)
        for timer in self.timers:
            # No overlap: a run that outlasts the period holds the timer, and when it ends the host computes
            # the next occurrence from the run's own time, which has passed, so it fires at once: one
            # catch-up for every occurrence missed (TimerListener.InvokeJobFunction, GetNextTimerInterval).
            if timer.next_fire <= now and not timer.running:
                self._fire_timer(timer, past_due=timer.past_due)
                timer.last_fire, timer.past_due = now, False
                timer.next_fire = timer.schedule.next_after(now)
        self.engine.fire_due_timers()
        self.lock_renewals.renew_due(now)
        while self._engine_waiting < self.engine.queued_work():
            self._engine_step()
        for queue in self.broker.ready_queues():
            if queue not in self.queues:
                continue
            while self.in_flight[queue] < self.concurrency:
                message = self.broker.receive(queue)
                if message is None:
                    break
                self._deliver(queue, message)

    def next_due(self) -> datetime | None:
        candidates = [
            self.scheduler.next_wake(),
            self.broker.next_due_time(),
            self.engine.next_due_time(),
            self.lock_renewals.due(),
            self._timeout_due(),
            *(t.next_fire for t in self.timers if not t.running),  # a running one's: when its run ends
        ]
        return min((c for c in candidates if c is not None), default=None)

    def run_until(
        self,
        horizon: datetime,
        *,
        stop: Callable[[], bool] = lambda: False,
        external_due: Callable[[], datetime | None] = lambda: None,
        before_pump: Callable[[], None] = lambda: None,
    ) -> None:
        """Runs everything due, skipping simulated time ahead whenever nothing is runnable, until
        ``stop()`` says so (checked whenever the system is idle at the current time) or the next
        due moment lies beyond ``horizon``."""
        with sdk_speedups.frozen_strict_mode() if self.sdk_speed_ups else contextlib.nullcontext():
            while True:
                before_pump()
                self.pump()
                if self.scheduler.run_one():
                    continue
                if stop():
                    return
                due = [d for d in (self.next_due(), external_due()) if d is not None]
                if not due or min(due) > horizon:
                    return
                self.clock.advance_to(min(due))

    def restart(self) -> dict[str, int]:
        """A host restart: in-flight invocations die (their messages stay locked until the lock
        expires; their activities run again), in-memory state is lost; queues, histories and the
        databases are kept. (The worker process is kept too: see docs/local-runner.md, what the runner does
        not model.)"""
        self._incarnation += 1
        # (with useMonitor, which every timer of the app sets: the runner does not work out the host's default)
        killed = [timer for timer in self.timers if timer.running and timer.function.trigger.get("useMonitor")]
        self._running.clear()
        dropped = self.scheduler.cancel_all()
        self._dropped_unstarted()
        activities = self.engine.restart_host()
        self.broker.restart_host()
        self.lock_renewals.clear()
        self.in_flight = dict.fromkeys(self.queues, 0)
        self._engine_waiting = 0
        for timer in self.timers:
            timer.running = False
        for timer in killed:
            # The schedule monitor records a run's status when the run returns: this one left Next at its own
            # occurrence, which the next host start finds past and runs at once (CheckPastDueAsync, IsPastDue).
            timer.next_fire, timer.past_due = self.clock.now(), True
        return {"invocations": dropped, "activities": activities}


def _stalling(stall: Callable[[], None] | None, stop_renewal: Callable[[], None]) -> Callable[[], None] | None:
    """The invocation's stall (``hostile.LockStalls``), which also stops its lock's renewal first."""
    if stall is None:
        return None

    def run() -> None:
        stop_renewal()
        stall()

    return run
