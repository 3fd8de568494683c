"""The rules orchestrator code lives by, checked on the code itself: it is deterministic (no wall
clock, no randomness, no I/O: it imports nothing that could reach a store, a queue or a clock) and
every orchestration's registered name carries a version, so a changed workflow gets a new name and
in-flight instances finish on the old one."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrators import names

ROOT = Path(__file__).resolve().parents[2]

# The modules whose code runs inside an orchestrator function (replayed by the Durable host).
ORCHESTRATOR_CODE = [
    "orchestrators/scheduler.py",
    "orchestrators/compensation.py",
    "orchestrators/agent_call.py",
    "orchestrators/payment_wait.py",
    "orchestrators/status.py",
    "orchestrators/alert.py",
    "orchestrators/result.py",
    "orchestrators/names.py",
    "orchestrators/fenced.py",
    "orchestrators/state_activity.py",
    "orchestrators/retired.py",
    "orchestrators/external_events.py",
    "orchestrators/timers.py",
    "orchestrators/logged.py",
]
# The one module of it that logs, guarded by ``context.is_replaying`` (test below): its events' logging.
LOGGING_MODULE = "orchestrators/logged.py"
LOGGING_IMPORTS = re.compile(r"^(observability\.events|logging)$")
# What that code may import: the Durable SDK, the pure domain, message names, the activity protocol
# and the message models it carries (plain data, no I/O), standard typing and dataclasses.
ALLOWED_IMPORTS = re.compile(
    r"^(__future__|typing|collections\.abc|dataclasses|datetime|azure\.durable_functions(\..+)?"
    r"|domain(\..+)?|contracts\.(names|messages|activities)|orchestrators(\..+)?)$"
)
# Calls that read the wall clock or draw randomness.
FORBIDDEN_CALLS = {"now", "utcnow", "today", "time", "random", "randint", "uniform", "uuid4", "uuid1", "sleep"}


def imported_modules(tree: ast.Module) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.append(node.module)
    return found


def called_names(tree: ast.Module) -> set[str]:
    called: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return called


@pytest.mark.parametrize("path", ORCHESTRATOR_CODE)
def test_orchestrator_code_imports_no_io_and_reads_no_clock(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    allowed = [ALLOWED_IMPORTS, *([LOGGING_IMPORTS] if path == LOGGING_MODULE else [])]
    assert [m for m in imported_modules(tree) if not any(a.match(m) for a in allowed)] == []
    assert called_names(tree) & FORBIDDEN_CALLS == set()


def test_the_one_module_of_orchestrator_code_that_logs_logs_only_when_not_replaying() -> None:
    """An event an orchestration logs must be logged once, not at each replay of the instance: its one function
    returns while ``context.is_replaying`` before it logs (tests/orchestrators/test_last_try_lost.py runs it)."""
    tree = ast.parse((ROOT / LOGGING_MODULE).read_text(encoding="utf-8"))
    [function] = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    guard = function.body[1]  # after the docstring
    assert isinstance(guard, ast.If) and ast.unparse(guard.test) == "context.is_replaying"
    assert [type(node) for node in guard.body] == [ast.Return]


def test_the_pure_domain_the_orchestrators_use_imports_no_azure_and_no_adapter() -> None:
    for path in sorted((ROOT / "domain").glob("*.py")):
        modules = imported_modules(ast.parse(path.read_text(encoding="utf-8")))
        assert [m for m in modules if m.startswith(("azure", "adapters", "dependencies"))] == [], path.name


def test_the_checks_above_would_catch_a_clock_read_and_an_adapter_import() -> None:
    bad = ast.parse(
        "from datetime import datetime\nfrom adapters.clock import SystemClock\nx = datetime.now()\n",
    )
    assert [m for m in imported_modules(bad) if not ALLOWED_IMPORTS.match(m)] == ["adapters.clock"]
    assert called_names(bad) & FORBIDDEN_CALLS == {"now"}


def test_every_registered_orchestration_has_a_versioned_name(functions: dict[str, Any]) -> None:
    orchestrations = {name for name, fn in functions.items() if fn.trigger["type"] == "orchestrationTrigger"}
    # the version before stays registered and running, and a retired one registered, so that an instance
    # of either still in flight at an upgrade can end
    assert orchestrations == {
        names.SCHEDULER,
        names.DRAINING_SCHEDULER,
        names.COMPENSATION,
        names.DELIVER_STATUS,
        names.DELIVER_ALERT,
        *names.RETIRED_SCHEDULERS,
    }
    assert names.SCHEDULER not in (names.DRAINING_SCHEDULER, *names.RETIRED_SCHEDULERS)
    assert all(re.fullmatch(r"[a-z_]+_v[0-9]+", name) for name in orchestrations), orchestrations
