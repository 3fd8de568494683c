"""The host side of Durable Functions for the local runner.

It keeps each instance's history and status, runs orchestrators the way the Functions host does (the
registered orchestrator function gets the context JSON and returns the state JSON, through the SDK's
own replay), and carries out the actions the orchestrator returns: activities, timers (on the injected
clock), waits for external events, when-any/when-all, cancelled timers. Activities are at-least-once:
``restart_host`` drops in-flight activity executions and they run again (after a function timeout,
``restart_worker``, they fail instead). ``deploy`` replaces the code
(an upgrade or a rollback): an instance whose name it lacks fails at its next episode, as in Azure.

Deterministic: one FIFO of work items (an activity's waits there while ``max_activities``, host.json's
``maxConcurrentActivityFunctions``, are in flight; episodes behind it go on), timers fire in (fire time,
instance, task id) order, instance ids come from a counter. The client's requests (a start, a raised event, a
termination) are answered at once, but reach the backend's queues only when the runner next drives the engine
(``settle_requests``), in instance id order: the requests one invocation makes at once (the starter's and the
supervisor's phases, ``PARALLEL_CALLS`` in flight) reach the HTTP API on threads of their own, in whatever
order the operating system runs them, and that order must not decide which instance runs first, its execution
number, or which draws of ``delivery_delay`` it gets (it did: a run of 300 orders could end otherwise from one
run to the next).

``delivery_delay`` (None: everything at once) makes the backend late, as Azure Storage's queues can be: each
control-queue message (a start, a raised event, a termination, a timer's ``TimerFired``, an activity's result)
and each activity work item reaches its worker that much later, the messages of one instance in the order
they were sent. ``late_start`` (None: never) makes a start one the backend takes but records late: the client is
answered an error, and the instance is unknown (a 404) until it is started later (``start``). The client-facing
operations return ``HostResponse``
(the status code and body of the extension's HTTP API); ``localrun.durable.http_api`` serves them to the SDK's
own client.
"""

from __future__ import annotations

import contextvars
import heapq
import json
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import Clock
from localrun.durable import history as ev
from localrun.durable.action_replay import ActionReplay, parse_timespan, replay_actions
from localrun.durable.actions import OrchestratorState
from localrun.durable.instance import Instance
from localrun.durable.replay import OrchestratorCallable, replay
from localrun.durable.work import ActivityWork, EpisodeWork, StepReport, WorkItem

log = logging.getLogger(__name__)

RunActivity = Callable[[str, Any], Any]

SUPPORTED = frozenset({"CallActivity", "CreateTimer", "WaitForExternalEvent", "WhenAny", "WhenAll", "ContinueAsNew"})

# What a start the backend records late is answered (``late_start``): the extension's ``HttpApiHandler`` answer to an
# exception from its storage, here the instance row's write that did not end in time
START_RECORDED_LATE = {
    "Message": "Something went wrong while processing your request",
    "ExceptionMessage": "The operation has timed out.",
    "ExceptionType": "Azure.RequestFailedException",
    "StackTrace": None,
}

# How long an activity's work-item message stays invisible once a worker took it (DurableTask.AzureStorage
# ``AzureStorageOrchestrationServiceSettings.WorkItemQueueVisibilityTimeout``, 5 minutes): a worker that dies
# after it sent the activity's result and before it deleted the message leaves the item to run again then.
WORK_ITEM_VISIBILITY_TIMEOUT = timedelta(minutes=5)

# The activity work item whose function the current thread runs (set around ``run_activity``): the host reads it to
# know which execution a function timeout fails (``DurableEngine.restart_worker``).
RUNNING_ACTIVITY: contextvars.ContextVar[ActivityWork | None] = contextvars.ContextVar("running_activity", default=None)


def not_an_orchestrator(name: str) -> str:
    """What the extension says of an orchestrator name no function of the deployed code has: it refuses a
    start under it, and fails an instance of it at its next episode (a rollback to code without it)."""
    return f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function."


class WorkerProcessExited(Exception):
    """An activity execution whose worker process exited under it (``DurableEngine.crash_before_run``): the extension
    records the activity's ``TaskFailed``, its code never having run."""


class HostResponse(NamedTuple):
    status: int
    body: Any = None


@dataclass
class EngineCounters:
    episodes: int = 0
    activity_executions: int = 0
    activities_redelivered: int = 0  # in-flight executions dropped by a host restart and queued again
    activities_rerun_late: int = 0  # work items run again after their result reached the orchestration
    activities_crashed: int = 0  # executions failed before their code ran (``crash_before_run``)
    activities_failed_by_timeout: int = 0  # executions failed by a worker restart after a function timeout
    timers_fired: int = 0
    deliveries_delayed: int = 0  # control-queue messages and activity work items ``delivery_delay`` held back
    starts_recorded_late: int = 0  # starts answered an error and carried out later (``late_start``)
    activities_waited: int = 0  # activity work items that waited simulated time for a slot (``max_activities``)
    activity_wait_longest_s: float = 0.0  # the longest such wait, in simulated seconds
    activities_peak: int = 0  # the most activity executions in flight at once
    history_events: int = 0  # every event appended to any history, overwritten instances included


class DurableEngine:
    def __init__(
        self,
        orchestrators: Mapping[str, OrchestratorCallable],
        run_activity: RunActivity,
        clock: Clock,
        *,
        context_fields: ev.ContextFields = ev.AZURE_STORAGE_CONTEXT,
        instance_id_namespace: str = "localrun",
    ) -> None:
        self._orchestrators = dict(orchestrators)
        self._run_activity = run_activity
        self._clock = clock
        self._context_fields = context_fields
        # the storage provider's longest timer, when the context tells the SDK (replay schema V3)
        maximum = context_fields.maximum_short_timer
        self._maximum_timer = None if maximum is None else parse_timespan(maximum)
        self._id_namespace = instance_id_namespace
        self._instances: dict[str, Instance] = {}
        self._queue: deque[WorkItem] = deque()
        self._in_flight: list[ActivityWork] = []
        self._host_generation = 0
        self._generated_ids = 0
        self._executions = 0
        # Every timer set, as (fire time, execution, task id, instance id), a heap. The execution
        # number counts instance starts, so it is also the instances' creation order. An entry whose
        # timer has since fired or been cancelled, or whose instance was overwritten, is dropped when
        # it reaches the top.
        self._timers: list[tuple[datetime, int, int, str]] = []
        # Activity work items not visible yet, as (due, order queued, work): a late run (``rerun_after_completion``)
        # or a work item ``delivery_delay`` holds back.
        self._late: list[tuple[datetime, int, ActivityWork]] = []
        self._late_queued = 0
        # Control-queue messages on their way, as (due, order sent, instance id, execution or None, event; None:
        # the start, ExecutionStarted): see ``delivery_delay``. Per instance, each is due no earlier than the one
        # sent before it (``_last_due``, ``_in_transit``): one instance's messages arrive in the order sent.
        self._arrivals: list[tuple[datetime, int, str, int | None, ev.HistoryEvent | None]] = []
        self._sent = 0
        self._last_due: dict[str, datetime] = {}
        self._in_transit: dict[str, int] = {}
        # The backend's latency (profile ``durable.delivery_delay_rate``, ``delivery_delay_ms``): asked once per
        # control-queue message and per activity work item, how late it reaches its worker. On Azure Storage a
        # worker polls its control queues and the work-item queue, backing off to ``maxQueuePollingInterval``
        # (1 s, host.json) when idle; a busy or restarting worker, or a partition's lease moving to another
        # instance, holds a queue's messages longer. So a timer fires at or after its time, an activity starts
        # late, and an event or an activity's result reaches its orchestration late. None: at once.
        self.delivery_delay: Callable[[], timedelta] | None = None
        # Asked once per start with its instance id (profile ``durable.late_start_rate``, ``late_start_ms``): how late
        # the backend records a start it took although the client was answered an error (0: answered 202 at once).
        # DurableTask.AzureStorage sends the start's ExecutionStarted message first and writes the instance row after
        # it (``CreateTaskOrchestrationAsync``); a row write that the client gives up on (a timeout) or that fails
        # after a retry of its own lands late, and until then the instance is unknown (a status read answers 404) and
        # its message is put back on the queue (``DedupeExecutionStartedMessagesAsync`` defers an ExecutionStarted
        # without its row, up to 10 dequeues). Asked by instance id, not from a shared stream: the starts of one
        # invocation reach the API on threads of their own, in whatever order they run.
        self.late_start: Callable[[str], timedelta] | None = None
        # Starts answered an error and carried out at their due time, as (due, instance id, name, input)
        self._late_starts: list[tuple[datetime, str, str, str | None]] = []
        # Asked once for each activity execution that sent its result (a late run too, and one whose orchestration
        # ended meanwhile: the work item does not know): True when the worker "dies" after sending that result and
        # before deleting the work item, which then runs again WORK_ITEM_VISIBILITY_TIMEOUT later, and may come back
        # again after that run ("Durable Functions ensures that each activity runs at least once",
        # durable-functions-code-constraints; design.md, numbered writes). None: never.
        self.rerun_after_completion: Callable[[], bool] | None = None
        # Whether an activity execution (by its input) fails before its code runs: the worker process running it
        # exited (a crash, an out-of-memory kill), which the extension reports as the activity's failure, as it
        # reports a function timeout (``restart_worker``). None: never (profile ``host.last_try_crash_rate``).
        self.crash_before_run: Callable[[Any], bool] | None = None
        # The Durable extension's ``maxConcurrentActivityFunctions`` (host.json): DurableTask.Core's activity dispatcher
        # fetches a work item only while fewer than that many activity executions are in flight on this instance
        # (``WorkItemDispatcher``: it takes a concurrency slot before it fetches), so the others wait on the work-item
        # queue, their orchestrations' timers and deadlines running meanwhile, while orchestrator episodes go on (the
        # orchestration dispatcher has its own limit). None: no limit.
        self.max_activities: int | None = None
        # when each activity work item found waiting for a slot was first found so (by ``id``: it is on the queue)
        self._waiting_since: dict[int, datetime] = {}
        self.counters = EngineCounters()
        # The requests answered and not yet settled, as (instance id, order answered, settle): see the module.
        self._requested: list[tuple[str, int, Callable[[], None]]] = []
        self._answered = 0
        self._requested_lock = threading.Lock()

    # --- the HTTP API the durable client talks to ---------------------------------------------------

    def _request(self, instance_id: str, settle: Callable[[], None]) -> None:
        """A request's effect on the queues, carried out by ``settle_requests``."""
        with self._requested_lock:
            self._answered += 1
            self._requested.append((instance_id, self._answered, settle))

    def settle_requests(self) -> int:
        """Carries out the requests answered since the last call, in instance id order (one instance's in the
        order they came: those an invocation made one after another), whatever order their threads ran in.
        Every method the runner drives the engine with calls it first; returns how many."""
        with self._requested_lock:
            requested, self._requested = self._requested, []
        for _, _, settle in sorted(requested, key=lambda request: (request[0], request[1])):
            settle()
        return len(requested)

    def start(self, name: str, instance_id: str | None = None, input_json: str | None = None) -> HostResponse:
        """POST orchestrators/{name}[/{instance_id}] with the input already JSON-encoded."""
        if name not in self._orchestrators:
            return HostResponse(400, {"ExceptionMessage": not_an_orchestrator(name)})
        if instance_id is None:
            self._generated_ids += 1
            instance_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{self._id_namespace}/{self._generated_ids}").hex
        refusal = instance_id_refusal(instance_id)
        if refusal is not None:
            return HostResponse(400, {"ExceptionMessage": refusal})
        late = self.late_start(instance_id) if self.late_start is not None else timedelta(0)
        if late > timedelta(0) and not self._running(instance_id):
            # taken, and recorded late: the client hears an error (its storage failing), the instance starts at ``due``
            self.counters.starts_recorded_late += 1
            heapq.heappush(self._late_starts, (self._now() + late, instance_id, name, input_json))
            return HostResponse(500, dict(START_RECORDED_LATE))
        return self._start_now(name, instance_id, input_json)

    def _running(self, instance_id: str) -> bool:
        existing = self._instances.get(instance_id)
        return existing is not None and not existing.is_finished

    def _start_now(self, name: str, instance_id: str, input_json: str | None) -> HostResponse:
        existing = self._instances.get(instance_id)
        if existing is not None and not existing.is_finished:
            message = f"An Orchestration instance with the status {existing.status.value} already exists."
            return HostResponse(409, message)
        if existing is not None:  # a finished instance is overwritten: a new execution, a new history
            del self._instances[instance_id]
        now = self._now()
        # numbered (creation order: the timers' order) when the start settles
        instance = Instance(
            instance_id=instance_id, name=name, execution=0, input_json=input_json, created=now, last_updated=now
        )
        self._instances[instance_id] = instance
        self._request(instance_id, lambda: self._settle_start(instance))
        return HostResponse(202, {"id": instance_id})

    def _settle_start(self, instance: Instance) -> None:
        instance_id = instance.instance_id
        if self._instances.get(instance_id) is not instance:  # purged by a filter before it settled
            return
        self._executions += 1
        instance.execution = self._executions
        self._instances[instance_id] = self._instances.pop(instance_id)  # the instances in creation order
        self._send(instance, None, instance.execution)

    def raise_event(self, instance_id: str, event_name: str, event_json: str) -> HostResponse:
        """POST instances/{id}/raiseEvent/{name} with the JSON-encoded event data."""
        instance = self._instances.get(instance_id)
        if instance is None:
            return HostResponse(404)
        if instance.is_finished:
            return HostResponse(410)
        event = ev.event_raised(self._now(), event_name, event_json)
        self._request(instance_id, lambda: self._send(instance, event))
        return HostResponse(202)

    def terminate(self, instance_id: str, reason: str) -> HostResponse:
        """POST instances/{id}/terminate: 202 once the termination is queued, as the extension answers
        (``DurableClient.TerminateAsync`` sends an ``ExecutionTerminated`` message to the instance);
        the instance stays as it is (Pending, Running) until its next episode takes the message.
        Until then, a raise event is still accepted and a terminate answers 202 again."""
        instance = self._instances.get(instance_id)
        if instance is None:
            return HostResponse(404)
        if instance.is_finished:
            return HostResponse(410)
        event = ev.execution_terminated(self._now(), reason)
        self._request(instance_id, lambda: self._send(instance, event))
        return HostResponse(202)

    def purge(self, instance_id: str) -> HostResponse:
        """DELETE instances/{id} (``HandleDeleteHistoryByIdRequestAsync``): 404 for an unknown instance, 412 for
        one not finished (its status named), else its history and instance row deleted: 200, one deleted."""
        instance = self._instances.get(instance_id)
        if instance is None:
            return HostResponse(404)
        if not instance.is_finished:
            message = (
                "Only orchestrations in a terminal state can be purged, but the orchestration with instance ID "
                f"{instance_id} has status {instance.status.value}"
            )
            return HostResponse(412, message)
        del self._instances[instance_id]
        return HostResponse(200, {"instancesDeleted": 1})

    def purge_by(
        self, created_from: datetime, created_to: datetime | None, statuses: frozenset[OrchestrationRuntimeStatus]
    ) -> int:
        """DELETE instances?createdTimeFrom=..&createdTimeTo=..&runtimeStatus=.. (the Azure Storage provider's
        ``PurgeInstanceHistoryAsync``, its query ``OrchestrationInstanceStatusQueryCondition``: ``CreatedTime ge``,
        ``CreatedTime le``, the statuses or'ed): every instance created from ``created_from`` to ``created_to`` (both
        included; None: now, as the extension takes it) whose status is one of ``statuses`` (none given: any
        status, a running one too, as the provider does); returns how many it deleted."""
        if created_to is None:
            created_to = self._now()
        doomed = [
            instance_id
            for instance_id, instance in self._instances.items()
            if created_from <= instance.created <= created_to and (not statuses or instance.status in statuses)
        ]
        for instance_id in doomed:
            del self._instances[instance_id]
        return len(doomed)

    def instance(self, instance_id: str) -> Instance | None:
        """The stored instance (read it, do not change it)."""
        return self._instances.get(instance_id)

    def instances(self) -> list[Instance]:
        self.settle_requests()
        return list(self._instances.values())

    # --- the work loop the runner drives --------------------------------------------------------

    def has_work(self) -> bool:
        self.settle_requests()
        return bool(self._queue)

    def queued_work(self) -> int:
        """How many work items ``run_next`` can take now (each takes one): every queued one, but for the activities
        past the free slots of ``max_activities``, which wait."""
        self.settle_requests()
        free = self._free_activity_slots()
        if free is None or len(self._queue) <= free:
            return len(self._queue)
        activities = self._hold_waiting_activities(free)
        return len(self._queue) - activities + min(activities, free)

    def run_next(self) -> StepReport | None:
        """Run one work item: one orchestrator episode or one activity execution, the first on the queue, or the
        first episode when every activity slot (``max_activities``) is taken."""
        self.settle_requests()
        if not self._queue:
            return None
        free = self._free_activity_slots()
        if free is None or free > 0 or isinstance(self._queue[0], EpisodeWork):
            item = self._queue.popleft()
        else:
            self._hold_waiting_activities(0)
            position = next((i for i, queued in enumerate(self._queue) if isinstance(queued, EpisodeWork)), None)
            if position is None:
                return None
            item = self._queue[position]
            del self._queue[position]
        if isinstance(item, EpisodeWork):
            return self._run_episode(item.instance_id)
        return self._execute_activity(item)

    def _free_activity_slots(self) -> int | None:
        return None if self.max_activities is None else max(self.max_activities - len(self._in_flight), 0)

    def _hold_waiting_activities(self, free: int) -> int:
        """Notes when each queued activity work item past the first ``free`` (those take the free slots) was first
        found waiting for a slot; returns how many activity work items are queued."""
        now = self._now()
        activities = 0
        for item in self._queue:
            if isinstance(item, ActivityWork):
                activities += 1
                if activities > free:
                    self._waiting_since.setdefault(id(item), now)
        return activities

    def next_due_time(self) -> datetime | None:
        """The earliest fire time of a pending timer, a late activity run or a message on its way, or None."""
        self.settle_requests()
        self._drop_dead_timers()
        due = [heap[0][0] for heap in (self._timers, self._late, self._arrivals, self._late_starts) if heap]
        return min(due) if due else None

    def fire_due_timers(self) -> int:
        """Deliver TimerFired for every timer due at the clock's time, in (fire time, instance
        creation order, task id) order, and queue the late activity runs and deliver the messages now due.
        Returns how many."""
        self.settle_requests()
        now = self._now()
        fired = 0
        while self._late and self._late[0][0] <= now:
            self._queue.append(heapq.heappop(self._late)[2])
            fired += 1
        while self._late_starts and self._late_starts[0][0] <= now:
            _, instance_id, name, input_json = heapq.heappop(self._late_starts)
            # its row written at last: the instance starts (a start of the same id made since is kept, a 409 here)
            self._start_now(name, instance_id, input_json)
            fired += 1
        while self._arrivals and self._arrivals[0][0] <= now:
            _, _, instance_id, execution, event = heapq.heappop(self._arrivals)
            self._in_transit[instance_id] -= 1
            if not self._in_transit[instance_id]:
                del self._in_transit[instance_id], self._last_due[instance_id]
            self._arrive(instance_id, execution, event)
            fired += 1
        while True:
            self._drop_dead_timers()
            if not self._timers or self._timers[0][0] > now:
                return fired
            fire_at, _, task_id, instance_id = heapq.heappop(self._timers)
            instance = self._instances[instance_id]
            del instance.pending_timers[task_id]
            # the timer's message was put on the control queue when the timer was created, visible from its fire
            # time: it does not wait behind a message sent to the instance since (an agent's reply just before
            # the deadline may reach the instance after it)
            self._send(instance, ev.timer_fired(now, task_id, fire_at), instance.execution, queued_before=True)
            self.counters.timers_fired += 1
            fired += 1

    def _drop_dead_timers(self) -> None:
        timers = self._timers
        while timers:
            fire_at, execution, task_id, instance_id = timers[0]
            instance = self._instances.get(instance_id)
            if (
                instance is not None
                and instance.execution == execution
                and instance.pending_timers.get(task_id) == fire_at
            ):
                return
            heapq.heappop(timers)

    def run_until_idle(self, max_steps: int = 100_000) -> int:
        """Run work and fire due timers until nothing is runnable at the clock's current time."""
        steps = 0
        while steps < max_steps:
            if self.run_next() is not None:
                steps += 1
            elif self.fire_due_timers() == 0:
                return steps
        raise RuntimeError(f"durable engine still busy after {max_steps} steps")

    def deploy(self, orchestrators: Mapping[str, OrchestratorCallable]) -> int:
        """A deployment (``azd deploy``: Flex Consumption replaces the code and restarts the host): a host
        restart (``restart_host``) with ``orchestrators`` registered instead. Instances keep their histories,
        inboxes and timers, and replay under the deployed code at their next episode."""
        self._orchestrators = dict(orchestrators)
        return self.restart_host()

    def restart_host(self) -> int:
        """A host restart: in-flight activity executions are lost (their results, if they come, are
        dropped) and their work items run again. Histories, inboxes, timers and queued work stay, as
        they do in the task hub's storage. Returns how many activity executions were dropped."""
        self.settle_requests()
        self._host_generation += 1
        dropped = self._in_flight
        self._in_flight = []
        self._queue.extend(dropped)
        self.counters.activities_redelivered += len(dropped)
        return len(dropped)

    def restart_worker(self, timed_out: ActivityWork | None, reason: str) -> int:
        """The worker process restarted after a function timeout (the host's ``OnTimeoutExceptionAsync`` restarts
        the worker running the invocation that timed out): every activity execution on it fails, and its
        orchestration is told as of any failure. The extension's ``FunctionExecutionHelper.ExecuteActivityFunction``
        reports a ``FunctionTimeoutException`` as ``FunctionTimeoutError`` and any other failed result while the
        host is not stopping as ``UserCodeError``, and ``TaskActivityShim`` turns both into the activity's
        ``TaskFailed`` (durable-functions-perf-and-scale, "Function timeouts": "if an activity times out, the
        function execution is recorded as a failure, and the orchestrator is notified"). Nothing runs again,
        unlike a host restart (``restart_host``). Returns how many activity executions failed."""
        self.settle_requests()
        self._host_generation += 1
        failed, self._in_flight = self._in_flight, []
        for work in failed:
            instance = self._instances.get(work.instance_id)
            if instance is None or instance.execution != work.execution or instance.is_finished:
                continue
            why = reason if work == timed_out else "the worker process running it was restarted: " + reason
            message = f"Activity function '{work.name}' failed: {why}"
            kind = "FunctionTimeoutException" if work == timed_out else "WorkerProcessRestarted"
            self._send(instance, ev.task_failed(self._now(), work.task_id, message, kind), work.execution)
        self.counters.activities_failed_by_timeout += len(failed)
        return len(failed)

    def history_events(self, instance_id: str) -> int:
        self.settle_requests()
        instance = self._instances.get(instance_id)
        return len(instance.history) if instance else 0

    # --- episodes ---------------------------------------------------------------------------------

    def _run_episode(self, instance_id: str) -> StepReport:
        instance = self._instances.get(instance_id)
        if instance is None:  # purged while the episode was queued (a purge by filter takes any status)
            return StepReport("episode", instance_id, "", "purged")
        instance.episode_queued = False
        if instance.is_finished:  # terminated while the episode was queued
            instance.inbox.clear()
            return StepReport("episode", instance_id, instance.name, instance.status.value)
        now = self._now()
        new_events = [ev.orchestrator_started(now)]
        if not instance.history:
            new_events.append(ev.execution_started(now, instance.name, instance.input_json))
        new_events.extend(instance.inbox)
        instance.inbox = []
        self._append(instance, new_events)
        terminated = next((e for e in new_events if e.type is ev.EventType.EXECUTION_TERMINATED), None)
        if terminated is not None:  # DurableTask.Core: HandleExecutionTerminatedEvent completes it, Terminated
            reason = json.loads(terminated.fields["Input"])
            self._finish(instance, OrchestrationRuntimeStatus.Terminated, reason, now)
            return StepReport("episode", instance_id, instance.name, instance.status.value)
        instance.status = OrchestrationRuntimeStatus.Running
        instance.last_updated = now
        self.counters.episodes += 1

        context = ev.context_json(
            instance.instance_id, instance.input_json, instance.history, fields=self._context_fields
        )
        orchestrator = self._orchestrators.get(instance.name)
        if orchestrator is None:  # deployed code without its name (a rollback): the extension fails it so
            self._finish(instance, OrchestrationRuntimeStatus.Failed, not_an_orchestrator(instance.name), now)
            return StepReport("episode", instance_id, instance.name, instance.status.value)
        try:
            state = replay(orchestrator, context)
        except Exception as error:  # the worker itself failed, not the orchestrator code
            log.exception("orchestrator %s failed outside the SDK's replay", instance.name)
            self._finish(instance, OrchestrationRuntimeStatus.Failed, str(error), now)
            return StepReport("episode", instance_id, instance.name, instance.status.value)

        problem = custom_status_refusal(state.custom_status)
        if problem is not None:
            failure = f"Orchestrator function '{instance.name}' failed: {problem}"
            self._finish(instance, OrchestrationRuntimeStatus.Failed, failure, now)
            return StepReport("episode", instance_id, instance.name, instance.status.value)
        instance.custom_status = state.custom_status
        unsupported = next((a["type"] for a in state.actions if a["type"] not in SUPPORTED), None)
        if unsupported is not None:
            failure = f"The local runner does not support the Durable action {unsupported}."
            self._finish(instance, OrchestrationRuntimeStatus.Failed, failure, now)
            return StepReport("episode", instance_id, instance.name, instance.status.value)
        # The extension replays the actions over the history, one after another (``action_replay``),
        # even those of a replay that raised: a non-determinism fails the orchestration there and then.
        replayed = replay_actions(state.raw.get("actions", []), instance.history, maximum_timer=self._maximum_timer)
        refused = replayed.non_determinism or replayed.unmodelled  # the latter: not as the extension goes on
        if refused is not None:
            self._finish(instance, OrchestrationRuntimeStatus.Failed, refused, now)
            return StepReport("episode", instance_id, instance.name, instance.status.value)
        self._schedule(instance, state, replayed, now)
        restart = next((a for a in state.actions if a["type"] == "ContinueAsNew"), None)
        ends = state.error is not None or restart is not None or state.is_done
        if not ends or not replayed.reached_end or replayed.open_tasks:
            # The orchestrator's end takes effect once the extension's replay got through every action
            # (until then the extension waits on one of them: nothing after it is scheduled), and then
            # only when no task is open: DurableTask.Core's TaskOrchestrationExecutor.ExecuteCore ends an
            # orchestration (completed, failed or continued as new) only then. "All durable timers ...
            # must either expire or be cancelled ... Otherwise the underlying framework will keep the
            # instance in the Running state even after the orchestrator function has completed"
            # (CreateTimer's remarks); an activity still running holds it too. A later episode decides again.
            self._append(instance, [ev.orchestrator_completed(now)])
        elif state.error is not None:
            self._finish(instance, OrchestrationRuntimeStatus.Failed, state.error, now)
        elif restart is not None:
            self._continue_as_new(instance, restart.get("input"), now)
        else:
            self._finish(instance, OrchestrationRuntimeStatus.Completed, state.output, now)
        return StepReport("episode", instance_id, instance.name, instance.status.value)

    def _schedule(self, instance: Instance, state: OrchestratorState, replayed: ActionReplay, now: datetime) -> None:
        """Schedule the tasks the extension's replay reached that the history does not hold yet (task ids
        ``len(instance.scheduled)`` .. ``replayed.invoked - 1``). A timer, cancelled or not, fires at its
        time while the instance runs: cancelling it takes it out of DurableTask.Core's open tasks (it no
        longer holds the instance, and its ``TimerFired`` is ignored there as a duplicate), but the timer
        message sent with ``TimerCreated`` is not withdrawn, and the SDK still reads the ``TimerFired``."""
        scheduling = state.scheduling_actions()
        new_events: list[ev.HistoryEvent] = []
        for task_id in range(len(instance.scheduled), replayed.invoked):
            action = scheduling[task_id]
            instance.scheduled.append(action["type"])
            if action["type"] == "CallActivity":
                name, input_json = action["functionName"], action.get("input")
                new_events.append(ev.task_scheduled(now, task_id, name, input_json))
                work = ActivityWork(instance.instance_id, instance.execution, task_id, name, input_json)
                delay = self._draw_delay()
                if delay:  # the work-item queue is not ordered: each item on its own
                    self._late_queued += 1
                    heapq.heappush(self._late, (now + delay, self._late_queued, work))
                else:
                    self._queue.append(work)
            else:
                fire_at = ev.parse_timestamp(action["fireAt"])
                new_events.append(ev.timer_created(now, task_id, fire_at))
                instance.pending_timers[task_id] = fire_at
                heapq.heappush(self._timers, (fire_at, instance.execution, task_id, instance.instance_id))
        self._append(instance, new_events)

    def _finish(
        self,
        instance: Instance,
        status: OrchestrationRuntimeStatus,
        output: Any,
        now: datetime,
    ) -> None:
        if status is OrchestrationRuntimeStatus.Failed:  # as the host logs it: which instance, and why
            log.warning("orchestration %s (%s) failed: %s", instance.instance_id, instance.name, str(output)[:2000])
        closing = [ev.orchestrator_completed(now)]
        closing.append(
            ev.HistoryEvent(
                ev.EventType.EXECUTION_COMPLETED,
                now,
                fields={"OrchestrationStatus": status.value, "Result": json.dumps(output)},
            )
        )
        self._append(instance, closing)
        instance.status = status
        instance.output = output
        instance.last_updated = now
        instance.pending_timers.clear()
        instance.inbox.clear()
        instance.pack_history()  # never replayed again: only the status query reads it

    def _continue_as_new(self, instance: Instance, input_json: str | None, now: datetime) -> None:
        """``continue_as_new``: the instance starts over under its id with ``input_json`` and an empty
        history (as the extension does: a new execution; what the old one scheduled and did not get is
        dropped, and so are events it left unread. On Azure Storage an event the extension processes
        after the orchestrator asked to continue is carried into the new execution instead,
        DurableTask.Core's ``BehaviorOnContinueAsNew.Carryover``: not modelled)."""
        self._append(instance, [ev.orchestrator_completed(now)])
        self._executions += 1
        instance.execution = self._executions
        instance.input_json = input_json
        instance.restart_history()
        instance.scheduled = []
        instance.pending_timers.clear()
        instance.inbox.clear()
        # Until the new execution's first episode takes its ExecutionStarted, the backend reports the
        # instance ContinuedAsNew ("a transient state", durable-functions-instance-management; Azure Storage:
        # AzureTableTrackingStore.UpdateStateAsync writes it for the ContinueAsNew event). It takes events
        # and terminations meanwhile: it is not finished.
        instance.status = OrchestrationRuntimeStatus.ContinuedAsNew
        instance.last_updated = now
        self._queue_episode(instance)

    # --- activities -------------------------------------------------------------------------------

    def _execute_activity(self, work: ActivityWork) -> StepReport:
        waited_since = self._waiting_since.pop(id(work), None)
        if waited_since is not None and waited_since < self._now():  # not taken at the instant a slot freed
            self.counters.activities_waited += 1
            waited = (self._now() - waited_since).total_seconds()
            self.counters.activity_wait_longest_s = max(self.counters.activity_wait_longest_s, waited)
        self._in_flight.append(work)
        self.counters.activities_peak = max(self.counters.activities_peak, len(self._in_flight))
        generation = self._host_generation
        self.counters.activity_executions += 1
        input_value = json.loads(work.input_json) if work.input_json is not None else None
        completion: ev.HistoryEvent
        running = RUNNING_ACTIVITY.set(work)
        try:
            if self.crash_before_run is not None and self.crash_before_run(input_value):
                self.counters.activities_crashed += 1
                raise WorkerProcessExited("the worker process running it exited before its code ran (injected)")
            result = self._run_activity(work.name, input_value)
        except Exception as error:
            outcome = "failed"
            completion = ev.task_failed(
                self._now(), work.task_id, f"Activity function '{work.name}' failed: {error}", type(error).__name__
            )
        else:
            outcome = "completed"
            completion = ev.task_completed(self._now(), work.task_id, _dumps_result(result))
        finally:
            RUNNING_ACTIVITY.reset(running)
        if generation != self._host_generation:  # the host restarted while this ran: the result is lost
            return StepReport("activity", work.instance_id, work.name, "dropped")
        self._in_flight.remove(work)
        instance = self._instances.get(work.instance_id)
        if work.late:
            self.counters.activities_rerun_late += 1
        if self.rerun_after_completion is not None and self.rerun_after_completion():
            self._late_queued += 1
            due = self._now() + WORK_ITEM_VISIBILITY_TIMEOUT
            heapq.heappush(self._late, (due, self._late_queued, replace(work, late=True)))
        if instance is None or instance.execution != work.execution or instance.is_finished:
            return StepReport("activity", work.instance_id, work.name, "dropped")
        # A late run's completion reaches a running execution as a duplicate: DurableTask.Core appends it and
        # ignores it ("Duplicate TaskCompleted Event", TaskOrchestrationContext), the SDK warns and sets it aside.
        self._send(instance, completion, work.execution)
        return StepReport("activity", work.instance_id, work.name, outcome)

    # --- control-queue messages -------------------------------------------------------------------

    def _send(
        self,
        instance: Instance,
        event: ev.HistoryEvent | None,
        execution: int | None = None,
        *,
        queued_before: bool = False,
    ) -> None:
        """A control-queue message to ``instance`` (``event``; None: its start), bound to ``execution`` (a
        timer's, an activity's result, the start) or to whichever execution runs when it arrives (a raised
        event, a termination). At once unless ``delivery_delay`` holds it back or an earlier message to the
        instance is still on its way (messages to one instance arrive in the order sent). ``queued_before``: a
        timer's, on the queue since the timer was created, waits behind none of the messages on their way (it
        was there first), and holds back those sent after it."""
        instance_id = instance.instance_id
        delay = self._draw_delay()
        if not delay and (queued_before or instance_id not in self._in_transit):
            self._arrive(instance_id, execution, event)
            return
        due = self._now() + delay
        if not queued_before:
            due = max(due, self._last_due.get(instance_id, due))
        self._last_due[instance_id] = max(due, self._last_due.get(instance_id, due))
        self._in_transit[instance_id] = self._in_transit.get(instance_id, 0) + 1
        self._sent += 1
        heapq.heappush(self._arrivals, (due, self._sent, instance_id, execution, event))

    def _arrive(self, instance_id: str, execution: int | None, event: ev.HistoryEvent | None) -> None:
        """A message reaches its instance: into the inbox, an episode queued. One for an instance that ended
        since, or for an execution it no longer runs, is dropped (DurableTask.Core discards it)."""
        instance = self._instances.get(instance_id)
        if instance is None or instance.is_finished or (execution is not None and instance.execution != execution):
            return
        if event is not None:
            instance.inbox.append(event)
        self._queue_episode(instance)

    def _draw_delay(self) -> timedelta:
        if self.delivery_delay is None:
            return timedelta(0)
        delay = self.delivery_delay()
        if delay:
            self.counters.deliveries_delayed += 1
        return delay

    # --- helpers ----------------------------------------------------------------------------------

    def _queue_episode(self, instance: Instance) -> None:
        if not instance.episode_queued:
            instance.episode_queued = True
            self._queue.append(EpisodeWork(instance.instance_id))

    def _append(self, instance: Instance, events: list[ev.HistoryEvent]) -> None:
        instance.append_history(events)
        self.counters.history_events += len(events)

    def _now(self) -> datetime:
        return self._clock.now()


# The extension sets an out-of-process orchestrator's custom status with ``SetCustomStatus``
# (``OutOfProcOrchestrationShim.ScheduleDurableTaskEvents``), which refuses one whose compact JSON is
# over 16 KB of UTF-16 (``MessagePayloadDataConverter.Serialize(value, 16)``: whole KB, rounded down,
# must not exceed 16); the ArgumentException fails the orchestration.
MAX_CUSTOM_STATUS_KB = 16


def custom_status_refusal(custom_status: Any) -> str | None:
    """The message the extension fails the orchestration with for ``custom_status``, or None."""
    if custom_status is None:
        return None
    text = json.dumps(custom_status, separators=(",", ":"), ensure_ascii=False)  # JToken.ToString(None)
    size_kb = len(text.encode("utf-16-le")) // 1024
    if size_kb <= MAX_CUSTOM_STATUS_KB:
        return None
    return (
        f"The UTF-16 size of the JSON-serialized payload must not exceed {MAX_CUSTOM_STATUS_KB} KB. "
        f"The current payload size is {size_kb} KB."
    )


# ``DurableClient.StartNewAsync`` (Azure/azure-functions-durable-extension) refuses these ids with an
# ArgumentException, which the HTTP API answers 400: the first two are built as
# ``new ArgumentException(nameof(instanceId), "...")``, arguments swapped, so .NET's message is
# "instanceId (Parameter '...')".
MAX_INSTANCE_ID_LENGTH = 256


def instance_id_refusal(instance_id: str) -> str | None:
    """The message of the extension's refusal to start ``instance_id``, or None if it accepts it."""
    if instance_id.startswith("@"):
        return "instanceId (Parameter 'Orchestration instance ids must not start with @.')"
    if any(c in "/\\?#" or _is_control(c) for c in instance_id):
        return (
            "instanceId (Parameter 'Orchestration instance ids must not contain /, \\, #, ?, or control characters.')"
        )
    if len(instance_id.encode("utf-16-le")) // 2 > MAX_INSTANCE_ID_LENGTH:  # .NET counts UTF-16 code units
        return f"Instance ID lengths must not exceed {MAX_INSTANCE_ID_LENGTH} characters."
    return None


def _is_control(c: str) -> bool:
    """.NET ``char.IsControl``: U+0000-U+001F and U+007F-U+009F."""
    return ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F


def _dumps_result(result: Any) -> str:
    """Encode an activity's return value as the worker's activity-trigger converter does."""
    from azure.durable_functions.models.utils.df_serialization import df_dumps

    return str(df_dumps(result))
