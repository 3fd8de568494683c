"""The output of an orchestration: ``{"result": <what happened>, ...details}``. It is what the
Durable status API shows an operator, and what replay tests assert."""

from __future__ import annotations

from typing import Any

Outcome = dict[str, Any]


def outcome(result: str, **details: Any) -> Outcome:
    return {"result": result, **details}
