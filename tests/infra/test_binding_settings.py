"""Every ``%NAME%`` binding expression resolves from the app settings of every way the app runs.

The Functions host resolves ``%NAME%`` in a binding from app settings only, and refuses (does not
load) a function whose expression does not resolve: a timer whose ``%STARTER_SCHEDULE%`` is not set
never fires. The bindings are taken as the host receives them: the raw bindings JSON the pinned
Functions runtime produces when it indexes function_app.py (tests/infra/runtime_index.py). The app
settings are those of the three places the app gets them from: ``local.settings.json.example``
(emulators), the file the postprovision hook writes (a local run against Azure; the hook really
runs, with a stub azd), and the Bicep app settings of the deployed app."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from settings import SETTINGS
from tests.infra.app_settings import bicep_app_settings
from tests.infra.paths import ROOT
from tests.infra.runtime_index import raw_bindings
from tests.infra.test_postprovision import run_hook, written
from tools.bicepcheck.query import Expression

EXPRESSION = re.compile(r"%([^%\s]+)%")
SCHEDULES = {"STARTER_SCHEDULE", "SUPERVISOR_SCHEDULE", "PEEK_SWEEP_SCHEDULE"}


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def expressions() -> dict[str, set[str]]:
    """Each ``%NAME%`` in any binding, with the functions that use it."""
    used: dict[str, set[str]] = {}
    for function, bindings in raw_bindings().items():
        for binding in bindings:
            for text in strings(binding):
                for name in EXPRESSION.findall(text):
                    used.setdefault(name, set()).add(function)
    return used


def unresolved(settings: Mapping[str, Any]) -> dict[str, list[str]]:
    """Expressions the settings leave unresolved (absent or empty), with the functions the host
    would refuse to load because of them."""
    return {
        name: sorted(functions)
        for name, functions in sorted(expressions().items())
        if not (isinstance(settings.get(name), Expression) or str(settings.get(name, "")).strip())
    }


def example_settings() -> dict[str, Any]:
    values: dict[str, Any] = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    return values


def bicep_settings() -> dict[str, Any]:
    return bicep_app_settings()


@pytest.fixture(scope="module")
def hook_settings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path: Path = tmp_path_factory.mktemp("postprovision")
    result = run_hook(tmp_path)
    assert result.returncode == 0, result.stderr
    values: dict[str, Any] = written(tmp_path)["Values"]
    return values


def test_the_runtime_index_has_the_timer_schedules() -> None:
    """The check below is not vacuous: the runtime's raw bindings carry the three timer schedules."""
    used = expressions()
    assert set(used) >= SCHEDULES
    timers = {
        function
        for function, bindings in raw_bindings().items()
        for b in bindings
        if b["type"] == "timerTrigger" and EXPRESSION.fullmatch(b["schedule"])
    }
    assert timers == set().union(*(used[name] for name in SCHEDULES))


def test_every_expression_resolves_from_the_local_example() -> None:
    assert unresolved(example_settings()) == {}


def test_every_expression_resolves_from_what_the_postprovision_hook_writes(hook_settings: dict[str, Any]) -> None:
    assert unresolved(hook_settings) == {}


def test_every_expression_resolves_from_the_bicep_app_settings() -> None:
    assert unresolved(bicep_settings()) == {}


def test_the_three_places_give_the_schedules_the_code_documents(hook_settings: dict[str, Any]) -> None:
    """A schedule is the settings.py default everywhere (tune it per environment by changing it)."""
    defaults = {s.name: s.default for s in SETTINGS if s.name in SCHEDULES}
    for place in (example_settings(), hook_settings, bicep_settings()):
        assert {name: place[name] for name in SCHEDULES} == defaults


def test_a_missing_setting_is_reported_with_the_functions_it_disables() -> None:
    """The resolver can fail: without STARTER_SCHEDULE the starter's timer is reported, and an
    empty value counts as missing."""
    settings = example_settings()
    without = {name: value for name, value in settings.items() if name != "STARTER_SCHEDULE"}
    missing = unresolved(without)
    assert list(missing) == ["STARTER_SCHEDULE"] and missing["STARTER_SCHEDULE"]
    assert list(unresolved({**settings, "PEEK_SWEEP_SCHEDULE": " "})) == ["PEEK_SWEEP_SCHEDULE"]
