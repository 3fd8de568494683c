"""The output of an orchestration: ``{"result": <what happened>, ...details}``. It is what the
Durable status API shows an operator, and what replay tests assert."""

from __future__ import annotations

from typing import Any

OrchestrationResult = dict[str, Any]


def orchestration_result(result: str, **details: Any) -> OrchestrationResult:
    return {"result": result, **details}
