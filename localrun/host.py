"""The local stand-in for the Functions host: it indexes ``function_app.app``'s registered
functions by trigger and invokes them the way the host does — Service Bus triggers with a received
message and the settlement actions, timer triggers on their NCRONTAB schedule, activities and
orchestrations through the Durable engine, and a durable client wherever a function declares one.

Production code runs unmodified; every invocation is a task on the virtual-time scheduler, so
invocations overlap in simulated time (up to ``maxConcurrentCalls`` per queue, from host.json).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from localrun.durable import fast_timestamps, sdk_speedups
from localrun.durable.client import LocalDurableClient
from localrun.durable.engine import DurableEngine
from localrun.durable.registry import registered_orchestrators
from localrun.functions import registered_functions
from localrun.ncrontab import Schedule
from localrun.servicebus import InProcessBroker
from localrun.virtual_time import TaskScheduler
from settings import Settings

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class FunctionSpec:
    name: str
    trigger_type: str
    trigger: dict[str, Any]
    function: Callable[..., Any]
    trigger_arg: str
    client_arg: str | None = None
    actions_arg: str | None = None

    def call(self, trigger_value: Any, *, client: Any = None, actions: Any = None) -> Any:
        fn = self.function
        kwargs: dict[str, Any] = {self.trigger_arg: trigger_value}
        if self.client_arg is not None:
            # What the host gives the durable-client middleware is a JSON string it turns into a
            # client; the runner hands the inner function its own client instead.
            fn = getattr(fn, "client_function", fn)
            kwargs[self.client_arg] = client
        if self.actions_arg is not None:
            kwargs[self.actions_arg] = actions
        result = fn(**kwargs)
        if inspect.iscoroutine(result):
            result = run_coroutine(result)
        return result


class _InlineExecutor(concurrent.futures.ThreadPoolExecutor):  # asyncio accepts only this type
    """Runs ``asyncio.to_thread`` work in the invoking task's own thread: it stays inside virtual
    time (a sleep there parks the task) and no thread pool is created and joined per invocation.
    ``submit`` never starts a pool thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def run_coroutine(coroutine: Any) -> Any:
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_InlineExecutor())
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


@dataclass
class TimerSpec:
    spec: FunctionSpec
    schedule: Schedule
    next_fire: datetime
    copy: int = 0


@dataclass
class TimerInfo:
    """What a timer-triggered function receives (``azure.functions.TimerRequest``)."""

    past_due: bool = False
    schedule_status: dict[str, Any] = field(default_factory=dict)


def _actions_parameter(fn: Callable[..., Any]) -> str | None:
    original = getattr(fn, "client_function", fn)
    for name, parameter in inspect.signature(original).parameters.items():
        annotation = parameter.annotation
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        if text.endswith("ServiceBusMessageActions"):
            return name
    return None


def _resolve(value: str, settings: Settings) -> str:
    """``%NAME%`` binding expressions read app settings, as in the host."""
    if value.startswith("%") and value.endswith("%"):
        return settings.raw(value.strip("%"))
    return value


def index_functions(functions: tuple[Any, ...]) -> list[FunctionSpec]:
    specs: list[FunctionSpec] = []
    for f in functions:
        trigger = f.get_trigger()
        client = next((b.name for b in f.get_bindings() if b.type == "durableClient"), None)
        fn = f.get_user_function()
        specs.append(
            FunctionSpec(
                name=f.get_function_name(),
                trigger_type=trigger.type,
                trigger=trigger.get_dict_repr(),
                function=fn,
                trigger_arg=trigger.name,
                client_arg=client,
                actions_arg=_actions_parameter(fn) if trigger.type == "serviceBusTrigger" else None,
            )
        )
    return specs


def host_json() -> dict[str, Any]:
    path = ROOT / "host.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


class LocalHost:
    def __init__(
        self,
        scheduler: TaskScheduler,
        broker: InProcessBroker,
        settings: Settings,
        *,
        timer_copies: dict[str, int] | None = None,
        functions: tuple[Any, ...] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.clock = scheduler.clock
        self.broker = broker
        self.settings = settings
        functions = functions if functions is not None else registered_functions()
        self.specs = {s.name: s for s in index_functions(functions)}
        self.queues = {s.trigger["queueName"]: s for s in self.specs.values() if s.trigger_type == "serviceBusTrigger"}
        self.activities = {
            s.trigger["activity"] or s.name: s for s in self.specs.values() if s.trigger_type == "activityTrigger"
        }
        fast_timestamps.install()
        sdk_speedups.install()
        self.engine = DurableEngine(registered_orchestrators(functions), self._run_activity, self.clock)
        self.client = LocalDurableClient(self.engine)
        now = self.clock.now()
        self.timers: list[TimerSpec] = []
        for s in self.specs.values():
            if s.trigger_type != "timerTrigger":
                continue
            schedule = Schedule.parse(_resolve(s.trigger["schedule"], settings))
            for copy in range((timer_copies or {}).get(s.name, 1)):
                self.timers.append(TimerSpec(s, schedule, schedule.next_after(now), copy))
        service_bus = host_json().get("extensions", {}).get("serviceBus", {})
        self.concurrency = int(service_bus.get("maxConcurrentCalls", 16))
        self.in_flight: dict[str, int] = dict.fromkeys(self.queues, 0)
        self._engine_waiting = 0
        self.executions: dict[str, int] = {}
        self.on_invoke: Callable[[FunctionSpec], None] | None = None

    # --- invocations ------------------------------------------------------------------------------

    def _count(self, spec: FunctionSpec) -> None:
        self.executions[spec.name] = self.executions.get(spec.name, 0) + 1
        if self.on_invoke is not None:
            self.on_invoke(spec)

    def _run_activity(self, name: str, value: Any) -> Any:
        spec = self.activities.get(name)
        if spec is None:
            raise RuntimeError(f"no activity function named {name!r}")
        self._count(spec)
        return spec.call(value)

    def _deliver(self, queue: str, message: Any) -> None:
        spec = self.queues[queue]

        def invoke() -> None:
            try:
                self._count(spec)
                spec.call(message, client=self.client, actions=self.broker.actions)
            finally:
                self.in_flight[queue] -= 1

        self.in_flight[queue] += 1
        self.scheduler.spawn(f"{spec.name}#{message.sequence_number}", invoke)

    def _fire_timer(self, timer: TimerSpec) -> None:
        spec = timer.spec

        def invoke() -> None:
            self._count(spec)
            spec.call(TimerInfo(), client=self.client)

        self.scheduler.spawn(f"{spec.name}@{self.clock.now().isoformat()}#{timer.copy}", invoke)

    def _engine_step(self) -> None:
        def step() -> None:
            self._engine_waiting -= 1
            self.engine.run_next()

        self._engine_waiting += 1
        self.scheduler.spawn("durable", step)

    # --- the loop -----------------------------------------------------------------------------------

    def pump(self) -> None:
        """Starts every invocation that is due now."""
        now = self.clock.now()
        for timer in self.timers:
            if timer.next_fire <= now:
                self._fire_timer(timer)
                timer.next_fire = timer.schedule.next_after(now)
        self.engine.fire_due_timers()
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
            *(t.next_fire for t in self.timers),
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
        with sdk_speedups.frozen_strict_mode():
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
        databases are kept."""
        dropped = self.scheduler.cancel_all()
        activities = self.engine.restart_host()
        self.broker.restart_host()
        self.in_flight = dict.fromkeys(self.queues, 0)
        self._engine_waiting = 0
        return {"invocations": dropped, "activities": activities}
