"""One simulation: the whole app, unmodified, on a laptop with no Azure.

The runner supplies what a Functions host and Azure would: the Cosmos DB protocol (a real
``@vercel/cosmosdb-server``, through the production adapters), an in-process Service Bus broker,
the Durable engine (the SDK's own replay), timers on schedule, simulated remote services, and a
simulated clock that jumps ahead whenever nothing is runnable. Faults come from the profile.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import supervisor.blueprint
from adapters.cosmos.alert_mark_store import CosmosAlertMarks
from adapters.cosmos.client import ensure_database
from adapters.cosmos.dead_letter_store import CosmosDeadLetterCursors
from adapters.cosmos.deferral_store import CosmosDeferralLog
from adapters.cosmos.health_store import CosmosHealthStore
from adapters.cosmos.ops_queries import CosmosOpsQueries
from adapters.cosmos.order_store import CosmosOrderStore
from adapters.cosmos.state_store import CosmosStateStore
from adapters.dead_letter_ports import DeadLetterWatchPorts
from adapters.remote.interface import RemoteError, RemoteService
from adapters.remote.services import remote_services
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import UNDO_OF, Ledger
from adapters.remote.simulators.service import SimulatedService
from adapters.servicebus.sender import OutgoingMessage, SendError
from contracts.names import ALL_QUEUES, ORDERS_CONTAINER, ORDERS_QUEUE, STATE_CONTAINER
from contracts.parsing import named_order_id
from contracts.store_retry import ROUND_PROPERTY as STORE_RETRY_ROUND
from dependencies import AppContext, use_context
from domain.alert_marks import document_id as alert_mark_id
from domain.circuit import partition_key as health_partition
from domain.dead_letters import partition_key as dead_letter_partition
from domain.states import TERMINAL_STATES, ProcessState
from domain.workflow import AGENTS
from localrun import hostile, orderless
from localrun.audit import (
    Audit,
    AuditedOrderStore,
    AuditedStateStore,
    CosmosFaults,
    CountedStore,
    CrashingService,
    EventRecorder,
    FaultySender,
    RemoteFailure,
)
from localrun.clocks import SkewedClocks, skew_of
from localrun.cosmos_server import CosmosServer
from localrun.host import LocalHost, local_settings_example
from localrun.operator import Operator, OperatorMove
from localrun.operator import app_settings as operator_settings
from localrun.operator_answers import OperatorAnswer
from localrun.outages import CircuitLog, CircuitMove
from localrun.profile import Profile
from localrun.progress import ProgressLine
from localrun.service_faults import ServiceFaults
from localrun.servicebus import InProcessBroker, QueuePolicy, SendFaults
from localrun.servicebus.messages import MessageState
from localrun.stale_reads import StaleReads
from localrun.virtual_time import TaskScheduler
from localrun.workload import Workload, make_workload
from settings import Settings
from supervisor.scan import ScanState

START = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
Drive = Callable[[LocalHost, datetime, Callable[[], bool], Callable[[], datetime | None], Callable[[], None]], None]
NON_TERMINAL = (ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.COMPENSATING)


# No operator watches a simulation unless its profile has an ``operator`` (localrun/operator.py): a human-review
# pause times out after 10 simulated minutes and takes its configured default action, unless the profile's
# settings say otherwise.
RUNNER_SETTINGS = {"REVIEW_TIMEOUT_SECONDS": "600"}


def base_settings(profile: Profile) -> dict[str, str]:
    """A run's app settings before its ``SimulationConfig.settings``: local.settings.json.example's values,
    the runner's own, then the profile's."""
    return {
        **local_settings_example(),
        **RUNNER_SETTINGS,
        **operator_settings(profile.operator),
        **hostile.app_settings(profile),
    }


# the name ``left_at_horizon`` gives failure records still owing their alert and status (the supervisor's owed sweep)
OWED_NOTIFICATIONS = "owed notifications"
FUNCTIONS_RUNNING = "functions running"  # and the one it gives a function invocation still running


@dataclass
class SimulationConfig:
    orders: int
    seed: int
    profile: Profile = field(default_factory=Profile)
    raw_lines: list[dict[str, Any]] = field(default_factory=list)
    horizon: timedelta = timedelta(hours=8)
    progress: bool = False
    # app settings on top of the profile's (and of RUNNER_SETTINGS)
    settings: dict[str, str] = field(default_factory=dict)
    # Patch two hot spots of the Durable SDK's replay for speed (localrun.durable.sdk_speedups,
    # fast_timestamps): off unless asked for, so a run exercises the SDK exactly as shipped.
    sdk_speed_ups: bool = False
    # Replaces ``host.run_until(horizon, stop=..., external_due=..., before_pump=...)``: ``localrun serve``
    # paces the run in real time and serves the ops API meanwhile (localrun/serve.py).
    drive: Drive | None = None


@dataclass
class SimulationResult:
    """Everything the report is computed from."""

    config: SimulationConfig
    workload: Workload
    audit: Audit
    ledger: Ledger
    broker: InProcessBroker
    host: LocalHost
    # every document of the state container at the end, reduced to what the report reads (``report_fields``)
    states: list[dict[str, Any]]
    first_remote_call: dict[str, datetime]
    sent_at: dict[str, datetime]  # when each valid order was submitted
    restarts: int
    wall_s: float
    simulated_s: float
    task_failures: list[tuple[str, str]]
    events: EventRecorder
    # the circuits' openings and closings, in true time (localrun/outages.py)
    circuit_moves: list[CircuitMove] = field(default_factory=list)
    # (order, service, undo action) -> when the service first answered an undo of it (true time):
    # evidence for ``kept_after_compensation``, from the runner's side of the remote calls
    undone_at: dict[tuple[str, str, str], datetime] = field(default_factory=dict)
    fenced_forward_calls: int = 0  # forward calls the services refused because an undo had fenced their key
    # the run stopped at ``config.horizon`` with work still due (orders unsettled, a timer, a message)
    horizon_reached: bool = False
    # what kept the run going when the horizon cut it (``still_due``'s names, in its order; empty if not cut)
    left_at_horizon: tuple[str, ...] = ()
    # the MessageIds of the workload's messages the run ended before sending (their time lay past its end)
    unsent_messages: frozenset[str] = frozenset()
    # the MessageIds of the workload's messages that duplicate detection dropped: an --inject-raw line took the
    # MessageId first, so they never reached the app (neither ``lost`` nor unmatched: the report's ``preempted``)
    preempted_messages: frozenset[str] = frozenset()
    # the MessageIds of the workload's messages whose client gave them up, every send failing (``_submit``): the app
    # may never have had them (neither ``lost`` nor unmatched unless a try stored them: the report's ``given_up``)
    given_up_messages: frozenset[str] = frozenset()
    # the size of each document of ``states`` as stored (KB of its JSON), for the cost model
    state_sizes_kb: list[float] = field(default_factory=list)
    # the runner's operator (profile ``operator``): its requests by action and outcome, and the moves the app took
    operator_actions: dict[str, dict[str, int]] | None = None
    operator_moves: list[OperatorMove] = field(default_factory=list)
    # its final answers, each reduced to what it promised (the report's ``operator_answers_broken``)
    operator_answers: list[OperatorAnswer] = field(default_factory=list)


class _RemoteProbe:
    """Records when an order's first remote call happened (submit-to-first-request latency), when
    each undo was answered (``kept_after_compensation``) and the calls that failed, all in true time.
    (The calls the service worked on past the step deadline, its caller long gone, are counted from
    the simulators: ``remote_calls_past_deadline``.)"""

    def __init__(
        self,
        inner: RemoteService,
        first: dict[str, datetime],
        clock: Any,
        undone_at: dict[tuple[str, str, str], datetime] | None = None,
        audit: Audit | None = None,
        service: str = "",
    ) -> None:
        self._inner = inner
        self._service = service  # the service this probe wraps (a request names its step's agent's)
        self._first = first
        self._clock = clock
        self._undone_at = undone_at if undone_at is not None else {}
        self._audit = audit

    def call(self, request: Any) -> dict[str, Any]:
        started = self._clock.now()
        self._first.setdefault(request.order_id, started)
        try:
            result = self._inner.call(request)
        except RemoteError as exc:
            self._failed(request, started, exc.transient)
            raise
        if request.action in UNDO_OF.values():  # an undo, by what it does (whether it fences its key or not)
            self._undone_at.setdefault((request.order_id, self._service, request.action), self._clock.now())
        return result

    def _failed(self, request: Any, started: datetime, transient: bool) -> None:
        if self._audit is not None:
            self._audit.remote_failures.append(RemoteFailure(started, request.order_id, self._service, transient))


# how many times a submitter (or the payment provider) tries one send before it gives up on the message
SUBMIT_TRIES = 50


class Submitted(Enum):
    SENT = "sent"
    PREEMPTED = "preempted"  # its first try was dropped by duplicate detection: another message took its MessageId
    GAVE_UP = "gave_up"  # every try failed (``servicebus.send_failure_rate`` near 1): the client gave the message up


def _submit(broker: InProcessBroker, message: OutgoingMessage) -> Submitted:
    """A submitter's send: like any Service Bus client it retries a failed send (the same
    MessageId, so a send that was stored anyway collapses in duplicate detection), ``SUBMIT_TRIES`` times, then
    gives the message up as a client whose sends keep failing does (before: a ``RuntimeError`` that ended the run
    with a traceback, from a rate of about 0.9 on). A try whose ack was lost may have stored it all the same: the app
    then has it as any message sent (``SENT``); ``GAVE_UP`` only when none did."""
    stored = broker.counters(ORDERS_QUEUE).sent
    for attempt in range(SUBMIT_TRIES):
        dropped = broker.counters(ORDERS_QUEUE).duplicates_dropped
        try:
            broker.send(ORDERS_QUEUE, message)
        except SendError:
            continue
        first = attempt == 0 and broker.counters(ORDERS_QUEUE).duplicates_dropped != dropped
        return Submitted.PREEMPTED if first else Submitted.SENT
    return Submitted.SENT if broker.counters(ORDERS_QUEUE).sent > stored else Submitted.GAVE_UP


def run_simulation(config: SimulationConfig) -> SimulationResult:
    wall_start = time.monotonic()
    seeds = random.Random(config.seed)
    profile = config.profile
    # The app settings of the run: local.settings.json.example's values (what `func start` would read
    # from a developer's local.settings.json), with the simulation's overrides. The host resolves
    # %NAME% binding expressions from these only; the app's context reads the same values.
    base = base_settings(profile)
    # the overrides checked on top of the rest (a name the app does not know is refused)
    settings = Settings.from_env(base, **config.settings)
    app_settings = {**base, **config.settings}
    scheduler = TaskScheduler(START)
    clock = scheduler.clock
    circuits = CircuitLog(clock)  # the circuits' moves in true time, and the outage alerts the run is owed
    audit = Audit()
    workload = make_workload(config.orders, profile, random.Random(seeds.getrandbits(64)), START, config.raw_lines)

    broker = InProcessBroker(
        clock,
        send_faults=SendFaults(profile.send_failure_rate, random.Random(seeds.getrandbits(64)))
        if profile.send_failure_rate
        else None,
    )
    for queue in (*ALL_QUEUES, *workload.submitters):
        broker.declare_queue(queue, QueuePolicy())
    hostile.refuse_status_queues(broker, workload.submitters, profile, START)

    ledger = Ledger()
    configs = {name: SimulatorConfig.from_profile(entry, origin=START) for name, entry in profile.remote.items()}
    first_call: dict[str, datetime] = {}
    undone_at: dict[tuple[str, str, str], datetime] = {}
    remote: dict[str, RemoteService] = {}
    crash_rng = random.Random(seeds.getrandbits(64))
    services = remote_services(settings, clock, configs, ledger, seeds.getrandbits(32))
    for service, inner in services.items():
        rate = max((profile.agent(a.name).crash_rate for a in AGENTS.values() if a.service == service), default=0.0)
        probed = _RemoteProbe(inner, first_call, clock, undone_at, audit, service)
        remote[service] = CrashingService(probed, rate, crash_rng, audit, clock) if rate else probed

    with CosmosServer(ranges=profile.cosmos_partition_ranges) as server:
        service_faults = None
        if profile.cosmos_service_fault_rate:  # its own generator: the other faults keep their streams
            rng = random.Random(f"{config.seed}:cosmos-service-faults")
            service_faults = ServiceFaults(profile.cosmos_service_fault_rate, rng, audit.injected)
        database = ensure_database(
            server.fast_client(service_faults.decide if service_faults is not None else None), "localrun"
        )
        raw_states = CosmosStateStore(database.get_container_client(STATE_CONTAINER))
        faults = CosmosFaults(profile, random.Random(seeds.getrandbits(64)), audit, clock)
        stale = None
        if profile.cosmos_stale_read_rate:  # its own generator: the other faults keep their streams
            stale = StaleReads(
                profile.cosmos_stale_read_rate,
                timedelta(milliseconds=profile.cosmos_stale_read_lag_ms),
                random.Random(f"{config.seed}:stale-reads"),
                clock.now,
                scheduler.current,
                audit.injected,
            )
        if profile.cosmos_latency_ms is not None:  # its own generator: the other faults keep their streams
            rng = random.Random(f"{config.seed}:cosmos-latency")
            faults.latency = hostile.CosmosLatency(profile.cosmos_latency_ms, rng, clock.sleep)
        # The app reads its host's clock (profile host.clock_skew_s); the runner's evidence keeps true time.
        skewed = SkewedClocks(clock, scheduler, profile.clock_skew_s, audit) if profile.clock_skew_s else None
        if skewed is not None:
            circuits.skew = skewed.offset  # the health documents hold the agents' clocks
        # The generators are drawn in the same order as before the context took every collaborator at once
        # (sender, then rng), so a seed's run is unchanged.
        sender = FaultySender(broker, profile, random.Random(seeds.getrandbits(64)), clock, audit, config.seed)
        ctx = AppContext(
            settings=settings,
            clock=skewed if skewed is not None else clock,
            states=AuditedStateStore(raw_states, clock, faults, audit, stale),
            orders=AuditedOrderStore(
                CosmosOrderStore(database.get_container_client(ORDERS_CONTAINER)), faults, audit, stale
            ),
            sender=sender,
            remote=remote,
            deferred=broker.deferred_store,
            deferrals=CountedStore(
                CosmosDeferralLog(database.get_container_client(STATE_CONTAINER)),
                faults,
                audit,
                reads=frozenset({"get"}),
                writes=frozenset({"save"}),
                stale=stale,
                document=lambda order_id: (("deferral", order_id), ("state", order_id)),
                subject=lambda doc: str(doc.order_id),
            ),
            ops=CosmosOpsQueries(database.get_container_client(STATE_CONTAINER)),
            # Dependency health (circuits shared across orders), with the same Cosmos faults as the rest.
            health=CountedStore(
                CosmosHealthStore(database.get_container_client(STATE_CONTAINER)),
                faults,
                audit,
                reads=frozenset({"get"}),
                writes=frozenset({"save"}),
                queries=frozenset({"count_waiting"}),
                stale=stale,
                document=lambda dependency: (("health", dependency), ("state", health_partition(dependency))),
                subject=lambda doc: str(doc.dependency),
            ),
            # The queues' dead-letter subqueues (the broker's) and the watch's cursors, with the same Cosmos faults.
            dead_letters=DeadLetterWatchPorts(
                broker.deferred_store,
                CountedStore(
                    CosmosDeadLetterCursors(database.get_container_client(STATE_CONTAINER)),
                    faults,
                    audit,
                    reads=frozenset({"get"}),
                    writes=frozenset({"save"}),
                    stale=stale,
                    document=lambda queue: (("deadletters", queue), ("state", dead_letter_partition(queue))),
                    subject=lambda doc: str(doc.queue),
                ),
            ),
            # The operator-alert problems that paged (notifications/repeats.py), with the same Cosmos faults.
            alert_marks=CountedStore(
                CosmosAlertMarks(database.get_container_client(STATE_CONTAINER)),
                faults,
                audit,
                reads=frozenset({"get"}),
                writes=frozenset({"save"}),
                stale=stale,
                document=lambda key: (("alertmark", alert_mark_id(key)), ("state", alert_mark_id(key))),
                subject=lambda doc: str(doc.key),
            ),
            rng=random.Random(seeds.getrandbits(64)),
            # its own generator, from the seed alone: the other streams are drawn as before
            unguessable=random.Random(f"{config.seed}:unguessable"),
        )
        recorder = EventRecorder()
        app_log = logging.getLogger("orders")
        app_log.addHandler(recorder)
        app_log.addHandler(circuits)
        previous_level = app_log.level
        if previous_level == logging.NOTSET or previous_level > logging.INFO:  # --log-level DEBUG keeps DEBUG
            app_log.setLevel(logging.INFO)
        use_context(ctx)
        # A simulation is a new worker process: its supervisor's scan state (the run counter, the cursors) is fresh,
        # its first run a catch-up. The module's object outlived the simulations before it in this process: the
        # catch-ups (and their queries) fell where that earlier run's counter left them, so two runs of one seed
        # differed (tests/localrun/test_determinism.py, in one pytest process with other simulations).
        supervisor.blueprint.SCAN_STATE = ScanState()
        host = LocalHost(
            scheduler,
            broker,
            app_settings,
            sdk_speed_ups=config.sdk_speed_ups,
            timer_copies={"supervisor": profile.supervisors, "starter_sweep": profile.starters},
        )
        if profile.lock_expiry_rate or profile.settle_latency_ms:  # own generator: other streams unchanged
            host.lock_stalls = hostile.LockStalls(
                profile.lock_expiry_rate,
                random.Random(f"{config.seed}:lock-stalls"),
                clock.sleep,
                profile.settle_latency_ms,
            )
        if skewed is not None:
            host.on_invoke = skewed.on_invoke

        def forget_process() -> None:  # a new worker process (a host restart, a function timeout): its memory is gone
            ctx.forget_process_memory()
            raw_states.forget_recent()

        host.on_worker_restart = forget_process
        if profile.worker_threads is not None:  # else the app settings' PYTHON_THREADPOOL_THREAD_COUNT (LocalHost)
            host.worker_threads = host.blocking_threads = profile.worker_threads  # the setting sizes both pools
        if profile.blocking_threads is not None:
            host.blocking_threads = profile.blocking_threads
        if profile.max_concurrent_activities is not None:  # else host.json's maxConcurrentActivityFunctions
            host.engine.max_activities = profile.max_concurrent_activities
        if profile.activity_rerun_rate:  # own generator: other streams unchanged
            reruns, rate = random.Random(f"{config.seed}:activity-reruns"), profile.activity_rerun_rate
            host.engine.rerun_after_completion = lambda: reruns.random() < rate
        if profile.last_try_crash_rate:  # own generator: other streams unchanged
            crashes, crash_rate = random.Random(f"{config.seed}:last-try-crashes"), profile.last_try_crash_rate
            host.engine.crash_before_run = lambda data: hostile.last_try_crashes(data, crashes, crash_rate)
        if profile.durable_delivery_delay_rate:  # own generator: other streams unchanged
            host.engine.delivery_delay = hostile.delivery_delays(
                profile.durable_delivery_delay_rate,
                profile.durable_delivery_delay_ms,
                random.Random(f"{config.seed}:durable-delays"),
            )
        if profile.durable_late_start_rate:  # drawn per instance id: other streams unchanged
            host.engine.late_start = hostile.late_starts(
                profile.durable_late_start_rate, profile.durable_late_start_ms, f"{config.seed}:durable-late-starts"
            )
        if profile.durable_outages or profile.durable_bare_outages:
            host.durable_api.before_answer = hostile.DurableOutages(
                profile.durable_outages, clock.now, START, audit.injected, profile.durable_bare_outages
            )
        pending = list(workload.arrivals)
        preempted: list[str] = []
        given_up: list[str] = []
        sent_at: dict[str, datetime] = {}
        latest: dict[str, ProcessState] = {}
        seen = 0
        restarts = 0
        restart_gaps = hostile.RestartGaps(profile.restart_every_s, random.Random(f"{config.seed}:restarts"))
        next_restart = restart_gaps.next_after(START)
        last_progress = [0.0]
        progress = ProgressLine(sys.stderr, len(workload.orders)) if config.progress else None
        # its own generator: a run without an operator draws nothing more; its cancels have another, made only
        # when it cancels, so an operator that does not draws as before
        operator = None
        if profile.operator is not None:
            cancels = random.Random(f"{config.seed}:operator-cancel") if profile.operator.cancel_rate > 0 else None
            discards = random.Random(f"{config.seed}:operator-discard") if profile.operator.discard_orderless else None
            operator = Operator(profile.operator, random.Random(f"{config.seed}:operator"), host, cancels, discards)

        def before_pump() -> None:
            nonlocal seen, restarts, next_restart
            if server.death is not None:  # exited unasked (killed, out of memory): ServerDied stops the run
                server.check()  # (a read of one attribute here: a 200-order run pumps a million times)
            now = clock.now()
            while pending and pending[0].at <= now:
                arrival = pending.pop(0)
                submitted = _submit(broker, arrival.message)
                if submitted is Submitted.PREEMPTED and arrival.kind != "raw":
                    preempted.append(arrival.message.message_id)
                if submitted is Submitted.GAVE_UP:
                    given_up.append(arrival.message.message_id)
                elif arrival.kind == "order" and arrival.order_id is not None:
                    sent_at[arrival.order_id] = now
            for transition in audit.transitions[seen:]:
                latest[transition.order_id] = transition.after
            if operator is not None:
                operator.observe(audit.transitions[seen:])
                operator.read_alerts(now)
                operator.act(now)
            seen = len(audit.transitions)
            if next_restart is not None and now >= next_restart:
                host.restart()
                forget_process()
                restarts += 1
                next_restart = restart_gaps.next_after(now)
            if progress is not None and time.monotonic() - last_progress[0] > 0.2:
                last_progress[0] = time.monotonic()
                progress.show(sum(1 for s in latest.values() if s in TERMINAL_STATES), now - START)

        # What keeps a run going, each named (the report's ``left_at_horizon``): the run is quiet when none holds.
        def owed_sweep() -> bool:  # a failure record still owes its alert and status: the owed sweep sends them
            return bool(audit.owing)

        def orderless_alert() -> bool:  # a payment waits for an order never submitted: the peek sweep owes its alert
            waiting = orderless.waiting_without_order(broker, latest)
            return bool(waiting and set(waiting) - orderless.told(broker))  # the alert queue read only when one waits

        still_due: tuple[tuple[str, Callable[[], bool]], ...] = (
            ("orders not sent yet", lambda: bool(pending)),
            (FUNCTIONS_RUNNING, scheduler.busy),
            # an orchestration still waits on a durable timer: something is still due
            ("durable work", lambda: host.engine.has_work() or host.engine.next_due_time() is not None),
            ("operator", lambda: operator is not None and operator.busy()),  # still means to act, or waits
            ("messages ready", lambda: any(q in host.queues for q in broker.ready_queues())),
            # a message met a Cosmos DB outage: it is handled again later (store_outage)
            ("store retries", lambda: broker.has_scheduled(ORDERS_QUEUE, STORE_RETRY_ROUND)),
            (  # a deferred message's retry round is still to come
                "deferred retries",
                lambda: broker.holds(
                    ORDERS_QUEUE, MessageState.SCHEDULED, lambda subject, _: subject == "RetryDeferred"
                ),
            ),
            (  # deferred, and its order exists: its submission missed it, the peek sweep owes it
                "deferred messages",
                lambda: broker.holds(
                    ORDERS_QUEUE, MessageState.DEFERRED, lambda _, body: named_order_id(body) in latest
                ),
            ),
            (OWED_NOTIFICATIONS, owed_sweep),
            ("orderless payments", orderless_alert),
            ("orders unsettled", lambda: any(state in NON_TERMINAL for state in latest.values())),
            (  # an outage paged whose circuit closed: its DependencyRecovered goes out once it stayed closed
                "outage recoveries",  # OUTAGE_SETTLE_SECONDS (the supervisor's runs go on until then)
                lambda: circuits.owed(clock.now(), settings.outage_settle, skew_of(profile.clock_skew_s, "supervisor")),
            ),
        )

        def quiet() -> bool:
            return not any(holds() for _, holds in still_due)

        def external() -> datetime | None:
            due = [pending[0].at] if pending else []
            planned = operator.next_due() if operator is not None else None
            if planned is not None:
                due.append(planned)
            # The clock stops at the next host restart too, so each comes at its time: before, the clock went from
            # one due moment to the next past it, and the restarts planned in between came as one, late. A
            # restart alone keeps no run going that has nothing else due.
            if next_restart is not None and (due or host.next_due() is not None):
                due.append(next_restart)
            return min(due, default=None)

        try:
            if config.drive is not None:
                config.drive(host, START + config.horizon, quiet, external, before_pump)
            else:
                host.run_until(START + config.horizon, stop=quiet, external_due=external, before_pump=before_pump)
            # cut by the horizon: work left, and nothing due before it (a serve stopped by its developer is not)
            due = [d for d in (host.next_due(), external()) if d is not None]
            horizon_reached = not quiet() and bool(due) and min(due) > START + config.horizon
            left = tuple(name for name, holds in still_due if holds()) if horizon_reached else ()
        finally:
            host.close()
            use_context(None)
            app_log.removeHandler(recorder)
            app_log.removeHandler(circuits)
            app_log.setLevel(previous_level)
            scheduler.stop_idle_threads()
        if progress is not None:
            before_pump()
            progress.end(sum(1 for s in latest.values() if s in TERMINAL_STATES), clock.now() - START)
        # One page at a time, each document reduced as it is read: the end of a long run holds every
        # order's final record, and the report reads four fields of it (and its size).
        states: list[dict[str, Any]] = []
        state_sizes_kb: list[float] = []
        if service_faults is not None:
            service_faults.stop()  # the runner's own reading of the evidence is no request of the app
        for document in database.get_container_client(STATE_CONTAINER).read_all_items():
            state_sizes_kb.append(len(json.dumps(document)) / 1024)
            states.append(report_fields(document))
        if profile.cosmos_partition_ranges > 1:  # the SDK's per-range queries the app's cross-partition ones took
            audit.injected["cosmos_range_queries"] += server.range_counts()["rangeQueries"]

    slow = sum(int(getattr(s, "slow_calls", 0)) for s in services.values())
    if slow:
        audit.injected["remote_slow_calls"] += slow
    # the services finish what they still work on (their callers gave up on it), at the time it is due
    simulators = [s for s in services.values() if isinstance(s, SimulatedService)]
    for simulator in simulators:
        simulator.finish()
    abandoned = [took for simulator in simulators for took in simulator.abandoned]
    if abandoned:
        audit.injected["remote_calls_timed_out"] += len(abandoned)
    past = sum(1 for took in abandoned if took >= settings.step_timeout.total_seconds())
    if past:
        audit.injected["remote_calls_past_deadline"] += past
    if host.lock_stalls is not None and host.lock_stalls.injected:
        audit.injected["handlers_past_lock"] += host.lock_stalls.injected
    if host.function_timeouts:  # invocations past host.json's functionTimeout, each restarting the worker
        audit.injected["function_timeouts"] += host.function_timeouts
    if host.thread_waits:  # profile host.worker_threads: invocations that waited for one of the worker's threads
        audit.injected["thread_waits"] += host.thread_waits
    if host.blocking_waits:  # blocking calls of async invocations that waited for a thread of their pool
        audit.injected["blocking_waits"] += host.blocking_waits
    if host.engine.counters.activities_waited:  # activity work items that waited for maxConcurrentActivityFunctions
        audit.injected["activity_waits"] += host.engine.counters.activities_waited
    if host.engine.counters.activities_failed_by_timeout:
        audit.injected["activities_failed_by_timeout"] += host.engine.counters.activities_failed_by_timeout
    counters = broker.counters()
    if counters.refused_sends:
        audit.injected["status_sends_refused"] += counters.refused_sends
    return SimulationResult(
        config=config,
        workload=workload,
        audit=audit,
        ledger=ledger,
        broker=broker,
        host=host,
        states=states,
        first_remote_call=first_call,
        sent_at=sent_at,
        restarts=restarts,
        wall_s=time.monotonic() - wall_start,
        simulated_s=(clock.now() - START).total_seconds(),
        task_failures=[(name, f"{type(exc).__name__}: {exc}") for name, exc in scheduler.failures],
        events=recorder,
        circuit_moves=circuits.moves,
        undone_at=undone_at,
        fenced_forward_calls=sum(int(getattr(s, "fenced_refusals", 0)) for s in services.values()),
        horizon_reached=horizon_reached,
        left_at_horizon=left,
        unsent_messages=frozenset(a.message.message_id for a in pending),
        preempted_messages=frozenset(preempted),
        given_up_messages=frozenset(given_up),
        state_sizes_kb=state_sizes_kb,
        operator_actions=operator.report() if operator is not None else None,
        operator_moves=operator.moves if operator is not None else [],
        operator_answers=operator.answers if operator is not None else [],
    )


REPORT_FIELDS = ("orderId", "processState", "lastError", "replyTo", "attempt", "completeBy", "receivedOwed")


def report_fields(document: dict[str, Any]) -> dict[str, Any]:
    """The fields of a state-container document the report reads (localrun/report.py,
    localrun/outages.py): the order, its state, its last error, its status queue (an injected order's is judged
    by it), its attempt (the MessageIds of its statuses), its ``completeBy`` (when a failure record began owing its
    statuses), whether it still owes ``Received`` (``receivedOwed``: a try of a status still in flight at the end
    says it first, ``localrun.statuses_in_flight``), and the notification its payment applied. A document without
    them (a deferral or health document) keeps none."""
    kept = {key: document[key] for key in REPORT_FIELDS if key in document}
    payment = document.get("payment")
    if payment:
        kept["payment"] = {"notificationId": payment["notificationId"]}
    return kept
