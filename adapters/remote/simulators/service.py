"""A simulated remote service: a ``RemoteService`` with latency, injected faults, idempotency keys,
fencing tokens and a ledger of side effects."""

from __future__ import annotations

import copy
import heapq
import itertools
import logging
import random
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from adapters.clock import Clock
from adapters.remote.interface import RemoteCall, RemoteError
from adapters.remote.simulators.catalog import CATALOG, ActionSpec
from adapters.remote.simulators.config import SimulatorConfig
from adapters.remote.simulators.ledger import Effect, Ledger
from settings import REMOTE_CALL_TIMEOUT

log = logging.getLogger(__name__)


@dataclass(order=True)
class _Work:
    """A call the service received and works on until ``due``, whether or not its client still waits."""

    due: datetime
    seq: int
    request: RemoteCall = field(compare=False)
    started: datetime = field(compare=False)
    outcome: dict[str, Any] | RemoteError | None = field(default=None, compare=False)


class SimulatedService:
    """Honours the contract a real service is expected to honour:

    - the same idempotency key and action give the same result (or the same permanent error) and
      no second side effect;
    - a call whose fencing token is lower than the highest seen for its idempotency key is refused
      (non-transient): a stale attempt cannot act after a newer one;
    - an undo fences the forward key it names (``fences_key``) as soon as the service takes it, under
      the same lock as every side effect: a forward call with a fenced key that arrives later (one
      that was still in flight when the undo came, or a redelivery) is refused (non-transient) and
      does nothing. A forward call that took effect first is undone by the undo;
    - a call with a key whose earlier call is still being worked on answers a transient error (the
      HTTP contract's 429/503 "in progress"), never a result of its own;
    - during an outage every call fails transiently.

    As over HTTP (``adapters.remote.http_service`` reads the answer within ``REMOTE_CALL_TIMEOUT`` of the
    call's start; the service has it once the request is sent), the caller waits at most ``client_timeout``
    seconds (None: as long as the call takes) and then gets a transient timeout, while the service goes
    on with the call and commits it (or refuses it) when its latency is over: a retry, a redelivery or
    an undo may reach the service while it still works on the first call, or after it committed. So
    does a call whose caller died waiting (a host restart): the service never knows. Work is applied in
    the order it is due, whenever a later call (or ``finish``) looks at the service.

    Random faults come from a seeded ``random.Random``, so a run is reproducible. Thread-safe."""

    def __init__(
        self,
        service: str,
        clock: Clock,
        config: SimulatorConfig | None = None,
        ledger: Ledger | None = None,
        seed: int | None = 0,
        client_timeout: float | None = REMOTE_CALL_TIMEOUT.total_seconds(),
    ) -> None:
        if service not in CATALOG:
            raise ValueError(f"no simulator for service {service!r}; known: {sorted(CATALOG)}")
        self.service = service
        self.config = config or SimulatorConfig()
        self.ledger = ledger if ledger is not None else Ledger()
        self._actions = CATALOG[service]
        self._clock = clock
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._origin = self.config.origin
        self._highest_token: dict[str, int] = {}
        self._fenced: set[str] = set()  # forward idempotency keys an undo has fenced
        self.fenced_refusals = 0  # forward calls refused because an undo had fenced their key
        self.slow_calls = 0  # calls that took the slow tail's latency
        self._outcomes: dict[tuple[str, str], dict[str, Any] | RemoteError] = {}
        self._sequence = 0
        self.calls = 0  # every call received, failed or not
        self.client_timeout = client_timeout
        self._working: list[_Work] = []  # calls received and not yet committed, soonest due first
        self._work_seq = itertools.count()
        self.abandoned: list[float] = []  # the service time of each call its caller gave up on (timed out)

    def call(self, request: RemoteCall) -> dict[str, Any]:
        started = self._clock.now()
        with self._lock:
            self.calls += 1
            if self._origin is None:
                self._origin = started
            low, high = self.config.latency_ms
            latency_s = self._rng.uniform(low, high) / 1000.0
            if self.config.slow_call_rate and self._rng.random() < self.config.slow_call_rate:
                self.slow_calls += 1
                latency_s = self._rng.uniform(*self.config.slow_latency_ms) / 1000.0
            work = _Work(started + timedelta(seconds=latency_s), next(self._work_seq), request, started)
            heapq.heappush(self._working, work)
        timeout = self.client_timeout
        self._clock.sleep(latency_s if timeout is None else min(latency_s, timeout))
        with self._lock:
            self._apply_due(self._clock.now())
            outcome = work.outcome
            if outcome is None:
                self.abandoned.append(latency_s)
        if outcome is None:
            where = f"{self.service}.{request.action} order {request.order_id} key {request.idempotency_key}"
            raise RemoteError(
                f"{where} timed out after {timeout}s (the service goes on with it)", transient=True, timed_out=True
            )
        if isinstance(outcome, RemoteError):
            raise outcome
        return copy.deepcopy(outcome)

    def finish(self) -> None:
        """Lets the service finish every call it is still working on (a run ended; the caller gave up
        on them long ago, the service did not)."""
        with self._lock:
            self._apply_due(None)

    def _apply_due(self, until: datetime | None) -> None:
        while self._working and (until is None or self._working[0].due <= until):
            work = heapq.heappop(self._working)
            try:
                work.outcome = self._answer(work.request, work.started, work.due)
            except RemoteError as exc:
                work.outcome = exc

    def in_outage(self, moment: datetime) -> bool:
        origin = self._origin
        return origin is not None and any(o.covers(origin, moment) for o in self.config.outages)

    def _answer(self, request: RemoteCall, started: datetime, at: datetime) -> dict[str, Any]:
        where = f"{self.service}.{request.action} order {request.order_id} key {request.idempotency_key}"
        if self.in_outage(started):
            raise RemoteError(f"{self.service} is unavailable (outage): {where}", transient=True)
        spec = self._actions.get(request.action)
        if spec is None:
            raise RemoteError(f"{self.service} has no action {request.action!r}", transient=False)

        highest = self._highest_token.get(request.idempotency_key, 0)
        if request.fencing_token < highest:
            raise RemoteError(
                f"stale fencing token {request.fencing_token} < {highest}: {where}",
                transient=False,
            )
        self._highest_token[request.idempotency_key] = request.fencing_token

        if spec.undoes is not None and request.fences_key:
            self._fenced.add(request.fences_key)  # from now on, that forward key can never act
        elif spec.undoes is None and request.idempotency_key in self._fenced:
            self.fenced_refusals += 1
            raise RemoteError(f"cancelled: an undo fenced this idempotency key: {where}", transient=False)

        outcome_key = (request.idempotency_key, request.action)
        recorded = self._outcomes.get(outcome_key)
        if isinstance(recorded, RemoteError):
            raise RemoteError(str(recorded), transient=False)
        if recorded is not None:
            log.info("idempotent replay of %s", where)
            return copy.deepcopy(recorded)
        if any(
            w.request.idempotency_key == request.idempotency_key and w.request.action == request.action
            for w in self._working
            if w.started < started
        ):
            raise RemoteError(
                f"{self.service} is still working on an earlier call: {where}", transient=True, in_progress=True
            )

        draw = self._rng.random()
        if draw < self.config.permanent_error_rate:
            error = RemoteError(f"{self.service} rejected {where} (simulated permanent failure)", transient=False)
            self._outcomes[outcome_key] = error
            raise error
        if draw < self.config.permanent_error_rate + self.config.transient_error_rate:
            raise RemoteError(f"{self.service} failed {where} (simulated transient failure)", transient=True)

        result = self._perform(spec, request, at)
        self._outcomes[outcome_key] = result
        if self._rng.random() < self.config.response_loss_rate:
            raise RemoteError(
                f"{self.service} timed out on {where} (simulated lost response)", transient=True, timed_out=True
            )
        return copy.deepcopy(result)

    def _perform(self, spec: ActionSpec, request: RemoteCall, at: datetime) -> dict[str, Any]:
        if spec.amount is not None:
            amount = spec.amount(request.payload)
        elif spec.undoes is not None:
            # An undo cancels what this service did for the order, never another provider's effect.
            amount = self.ledger.outstanding(request.order_id, spec.undoes, self.service)
        else:
            raise ValueError(f"{self.service}.{spec.name}: an action needs an amount or an action it undoes")
        result: dict[str, Any] = {}
        if amount > 0 or spec.undoes is None:
            self._sequence += 1
            reference = f"{spec.reference_prefix}-{self.service}-{self._sequence:06d}"
            self.ledger.record(
                Effect(
                    service=self.service,
                    action=spec.name,
                    order_id=request.order_id,
                    idempotency_key=request.idempotency_key,
                    amount=amount,
                    reference=reference,
                    at=at,
                )
            )
            result[spec.reference_field] = reference
        else:
            result[spec.reference_field] = None  # nothing outstanding to undo: a no-op, still a success
        if spec.amount_field is not None:
            result[spec.amount_field] = amount
        return result
