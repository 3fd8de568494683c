"""The interface agents use to reach their remote service (a simulator by default, or HTTP)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from domain.text import carriable


class RemoteError(Exception):
    """A remote call failed. ``transient`` says whether the same call may succeed later. What a transient
    failure says of the service's health (its circuit, ``domain/circuit.py``): ``in_progress``, the service
    answered that it is still working on an earlier call with the same key (it is up, with no result);
    ``timed_out``, no answer came in time (it may be slow or hung: half a failure); neither, it answered
    an error or could not be reached (a failure). Its message quotes what the service answered, and goes into
    the step's failure, the record's ``lastError``, log lines and the operator console: it is made carriable
    (``domain.text``: no bidirectional override, control character or line break)."""

    def __init__(self, message: str, *, transient: bool, timed_out: bool = False, in_progress: bool = False) -> None:
        super().__init__(carriable(message))
        self.transient = transient
        self.timed_out = timed_out
        self.in_progress = in_progress


@dataclass(frozen=True)
class RemoteCall:
    service: str
    action: str  # "reserve", "release", "charge", "refund", "ship"
    order_id: str
    idempotency_key: str  # the same on every retry of the same logical operation
    fencing_token: int  # the attempt; the service rejects a token lower than one it has seen
    payload: dict[str, Any]
    # Undo calls only: the forward idempotency key this undo cancels. The service fences that key
    # when it takes the undo: any forward call with it that arrives later (a slow call still in
    # flight, a redelivery, an agent whose clock runs behind) is refused, never performed.
    fences_key: str | None = None


class RemoteService(Protocol):
    def call(self, request: RemoteCall) -> dict[str, Any]:
        """Performs the action (or returns the recorded result of the same idempotency key);
        raises ``RemoteError``. An undo call (``fences_key`` set) first fences that forward key, in
        the same atomic step as the undo: a forward call with a fenced key is refused with a
        non-transient error."""
        ...
