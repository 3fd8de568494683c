"""Retired orchestrator versions: what an instance of an earlier scheduler version does when it
replays after an upgrade.

Its history was recorded by code that no longer exists, so it cannot be replayed step by step. It
ends at once, touching nothing: the record it owned stays Processing with its ``completeBy``, and
the supervisor recovers it when that passes, like any attempt that stopped, with a new attempt of
the current version. An upgrade costs each order caught mid-attempt one counted retry; disabling the
two functions that claim and letting in-flight attempts finish first avoids that (docs/design.md
"Versions")."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import azure.durable_functions as df

from orchestrators.result import OrchestrationResult, orchestration_result


def retire(context: df.DurableOrchestrationContext, version: str) -> Generator[Any, Any, OrchestrationResult]:
    """Ends an instance of the retired ``version`` with ``Superseded`` (what the Durable status API
    shows for it; the supervisor's retry of its order is logged as any retry)."""
    return orchestration_result("Superseded", version=version)
    yield  # a generator: the Durable SDK drives orchestrators as generators
