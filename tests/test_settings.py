"""Settings are parsed and checked once, when they are built: a value the app cannot use fails at start-up
with a message naming the setting, never in the middle of a run."""

from __future__ import annotations

import dataclasses
import json
import typing
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from settings import SETTINGS, Setting, Settings, SettingsError

ROOT = Path(__file__).resolve().parent.parent
BAD_VALUES = [
    pytest.param(setting, bad, id=f"{setting.name}={bad!r}") for setting in SETTINGS for bad in setting.kind.refuses
]
FIELDS = {f.metadata["setting"]: f for f in dataclasses.fields(Settings)}


def test_every_declared_setting_has_one_typed_field_and_every_field_one_declaration() -> None:
    declared = [s.name for s in SETTINGS]
    assert len(declared) == len(set(declared))
    assert sorted(FIELDS) == sorted(declared)


@pytest.mark.parametrize("setting, bad", BAD_VALUES)
def test_a_bad_value_fails_at_construction_naming_the_setting_and_what_it_expects(setting: Setting, bad: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({setting.name: bad})
    message = str(raised.value)
    assert message.startswith(f"{setting.name}={bad!r} is not valid")
    assert setting.kind.expected in message


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_either_refuses_some_value_or_is_declared_free_text(setting: Setting) -> None:
    """A new setting gets a kind: either it refuses some values (and the test above tries them) or it takes
    any text on purpose (connection strings, ids and names read by the platform)."""
    free_text = setting.kind.expected in ("any text", "`True` or anything else")
    assert bool(setting.kind.refuses) != free_text


def test_defaults_parse_into_their_declared_types() -> None:
    settings = Settings.from_env({})
    hints = typing.get_type_hints(Settings)
    for name, f in FIELDS.items():
        value = getattr(settings, f.name)
        assert isinstance(value, hints[f.name]), (name, value)
    assert settings.max_pending == 1000
    assert settings.step_timeout == timedelta(seconds=60)
    assert settings.agent_retry_base == timedelta(milliseconds=500)
    assert settings.supervisor_window == timedelta(minutes=60)
    assert settings.cosmos_verify_tls is True
    assert settings.review_default_action == "compensate"
    assert settings.service_url("payment_backup") == ""


def test_the_local_settings_example_parses() -> None:
    values = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    settings = Settings.from_env(values)
    assert settings.cosmos_verify_tls is False
    assert settings.cosmos_key != ""


def test_environment_values_and_overrides_take_the_place_of_defaults() -> None:
    settings = Settings.from_env(
        {"MAX_FAILURES": "5", "COSMOS_VERIFY_TLS": "False", "PAYMENT_SERVICE_URL": "https://pay.example.com/v1"},
        MAX_FAILURES="7",
        REVIEW_DEFAULT_ACTION="Retry",
        CIRCUIT_COOLDOWN_SECONDS="50",
        CIRCUIT_COOLDOWN_MAX_SECONDS="20",
    )
    assert settings.max_failures == 7  # the override wins over the environment
    assert settings.cosmos_verify_tls is False
    assert settings.review_default_action == "retry"
    assert settings.service_url("payment") == "https://pay.example.com/v1"
    policy = settings.circuit_policy
    assert policy.cooldown == timedelta(seconds=50)
    assert policy.cooldown_max == timedelta(seconds=50)  # never below the first cool-down


def test_every_bad_value_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"MAX_PENDING": "many"}, STEP_TIMEOUT_SECONDS="0")
    assert "MAX_PENDING='many'" in str(raised.value)
    assert "STEP_TIMEOUT_SECONDS='0'" in str(raised.value)


def test_an_unknown_override_or_service_is_refused() -> None:
    with pytest.raises(SettingsError, match="MAX_PENDNG"):
        Settings.from_env({}, MAX_PENDNG="1")
    with pytest.raises(SettingsError, match="BILLING_SERVICE_URL"):
        Settings.from_env({}).service_url("billing")


def test_settings_are_frozen() -> None:
    settings = Settings.from_env({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.max_failures = 9  # type: ignore[misc]


def test_the_platform_flag_is_never_refused() -> None:
    assert Settings.from_env({"WEBSITE_AUTH_ENABLED": "True"}).website_auth_enabled is True
    assert Settings.from_env({"WEBSITE_AUTH_ENABLED": "whatever"}).website_auth_enabled is False


def test_a_simulation_profile_with_a_bad_setting_is_refused_when_it_is_loaded() -> None:
    from localrun.profile import Profile, ProfileError

    with pytest.raises(ProfileError, match="MAX_OUTAGE_WAIT_MINUTES='soon' is not valid"):
        Profile.parse({"settings": {"MAX_OUTAGE_WAIT_MINUTES": "soon"}})


def test_the_app_refuses_to_start_with_a_bad_setting_and_names_it() -> None:
    """The host indexes the app by importing function_app: a bad value stops it there, before any trigger."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MAX_FAILURES": "three"}
    command = [sys.executable, "-c", "import function_app"]
    started = subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode != 0
    assert "SettingsError: MAX_FAILURES='three' is not valid: expected an integer >= 1" in started.stderr


def test_the_values_the_bicep_deploys_parse() -> None:
    """A deployed app starts with the literal values infra/modules/functionapp.bicep gives it (values the
    Bicep computes, such as the Cosmos endpoint, are left to their defaults here)."""
    from tests.infra.app_settings import bicep_app_settings

    declared = {s.name for s in SETTINGS}
    deployed = bicep_app_settings()
    literals = {name: value for name, value in deployed.items() if name in declared and isinstance(value, str)}
    assert "STARTER_SCHEDULE" in literals and "MAX_FAILURES" in literals
    settings = Settings.from_env(literals)
    assert settings.service_bus_credential == "managedidentity"
    assert settings.worker_opentelemetry_enabled is True


@pytest.mark.parametrize(("cache", "cooldown"), [("30", "30"), ("45", "30"), ("5", "5"), ("16", "30"), ("29", "30")])
def test_a_health_window_over_half_the_cool_down_is_refused(cache: str, cooldown: str) -> None:
    """A closed view trusted for a whole cool-down would admit calls past an opening into half-open;
    half the cool-down is kept as the margin for clock skew between agent instances (a prober judges
    the opener's ``probeAfter`` by its own clock)."""
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({}, CIRCUIT_HEALTH_CACHE_SECONDS=cache, CIRCUIT_COOLDOWN_SECONDS=cooldown)
    assert f"CIRCUIT_HEALTH_CACHE_SECONDS={cache!r}" in str(raised.value)
    assert "CIRCUIT_COOLDOWN_SECONDS" in str(raised.value)


@pytest.mark.parametrize(("cache", "cooldown"), [("15", "30"), ("5", "30"), ("0", "1"), ("1", "2")])
def test_a_health_window_of_at_most_half_the_cool_down_is_accepted(cache: str, cooldown: str) -> None:
    settings = Settings.from_env({}, CIRCUIT_HEALTH_CACHE_SECONDS=cache, CIRCUIT_COOLDOWN_SECONDS=cooldown)
    assert settings.circuit_health_cache * 2 <= settings.circuit_policy.cooldown


def test_the_telemetry_switches_default_to_what_happens_when_they_are_unset() -> None:
    """The Functions worker reads the two switches itself, and takes an unset one as false; the table's
    default is what a deployment without the setting gets (docs/observability.md: who exports)."""
    from observability.setup import CONNECTION_STRING, WORKER_OPENTELEMETRY, WORKER_TELEMETRY, telemetry_plan

    defaults = {s.name: s.default for s in SETTINGS}
    connected = {CONNECTION_STRING: f"InstrumentationKey={uuid.UUID(int=0)}"}  # a placeholder, no real key
    for switch in (WORKER_TELEMETRY, WORKER_OPENTELEMETRY):
        others = {name: "true" for name in (WORKER_TELEMETRY, WORKER_OPENTELEMETRY) if name != switch}
        for other in ({}, others):
            assert telemetry_plan({**connected, **other}) == telemetry_plan(
                {**connected, **other, switch: defaults[switch]}
            ), switch


@pytest.mark.parametrize("name", ["PYTHON_ENABLE_OPENTELEMETRY", "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"])
@pytest.mark.parametrize(
    "value", ["1", "true", "True", " t", "Y", "yes", "0", "false", "F", "n", "NO", "on", "off", ""]
)
def test_a_switch_the_worker_reads_itself_is_read_as_the_worker_reads_it(name: str, value: str) -> None:
    """The worker (azure_functions_runtime's ``is_true_like``, pinned) takes ``t`` and ``y`` as true and any other
    text as false: the app agrees on every value it accepts, and refuses a value the worker would read as false
    though it may be meant as true (``on``), instead of letting the worker turn the switch off quietly."""
    from azure_functions_runtime.utils.app_setting_manager import is_true_like  # type: ignore[import-untyped]

    setting = next(s for s in SETTINGS if s.name == name)
    try:
        parsed = setting.parse(value)
    except SettingsError:
        assert not is_true_like(value) and value.strip().lower() not in ("0", "false", "f", "no", "n")
        return
    assert parsed is is_true_like(value)


@pytest.mark.parametrize("value", ["1", "5", "74", "103"])
def test_a_worker_pool_smaller_than_the_sync_concurrency_is_refused(value: str) -> None:
    """One instance's host hands the worker up to ``sync_concurrency()`` sync invocations at once (3 request queues x
    maxConcurrentCalls 16 + maxConcurrentActivityFunctions 40 + HTTP perInstanceConcurrency 16); the ones past the pool
    wait for a thread while their lock renewal and functionTimeout run. Before, any count was accepted (and unset, the
    deployed app ran with the worker's default of 5 threads on one core)."""
    from settings import sync_concurrency

    assert sync_concurrency() == 104
    refused = r"PYTHON_THREADPOOL_THREAD_COUNT='\d+' is not valid: expected at least 104"
    with pytest.raises(SettingsError, match=refused):
        Settings.from_env({}, PYTHON_THREADPOOL_THREAD_COUNT=value)


@pytest.mark.parametrize(("value", "threads"), [("", 0), ("104", 104), ("200", 200)])
def test_a_worker_pool_that_covers_the_sync_concurrency_or_none_is_accepted(value: str, threads: int) -> None:
    assert Settings.from_env({}, PYTHON_THREADPOOL_THREAD_COUNT=value).worker_threads == threads


def test_the_worker_pool_is_read_as_the_worker_reads_it() -> None:
    """azure_functions_runtime takes ``int()`` of the text, at least 1 (``utils.threadpool``); the app refuses what the
    worker would warn about and ignore."""
    from azure_functions_runtime.utils.threadpool import _validate_thread_count  # type: ignore[import-untyped]

    setting = next(s for s in SETTINGS if s.name == "PYTHON_THREADPOOL_THREAD_COUNT")
    for bad in setting.kind.refuses:
        assert not _validate_thread_count(bad)
    assert _validate_thread_count(setting.written) and setting.parse(setting.written) == int(setting.written)
