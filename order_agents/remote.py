"""The interface agents use to reach their remote service (a simulator by default, or HTTP)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class RemoteError(Exception):
    """A remote call failed. ``transient`` says whether the same call may succeed later."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class RemoteCall:
    service: str
    action: str  # "reserve", "release", "charge", "refund", "ship"
    order_id: str
    idempotency_key: str  # the same on every retry of the same logical operation
    fencing_token: int  # the attempt; the service rejects a token lower than one it has seen
    payload: dict[str, Any]


class RemoteService(Protocol):
    def call(self, request: RemoteCall) -> dict[str, Any]:
        """Performs the action (or returns the recorded result of the same idempotency key);
        raises ``RemoteError``."""
        ...
