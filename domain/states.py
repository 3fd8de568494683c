"""The states of an order and of each workflow step."""

from __future__ import annotations

from enum import StrEnum


class ProcessState(StrEnum):
    PENDING = "Pending"
    PROCESSING = "Processing"
    PROCESSED = "Processed"
    ERROR = "Error"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"


TERMINAL_STATES = frozenset(
    {ProcessState.PROCESSED, ProcessState.ERROR, ProcessState.COMPENSATED, ProcessState.COMPENSATION_FAILED}
)


class StepStatus(StrEnum):
    IN_PROGRESS = "InProgress"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
