"""App settings: every value the code reads from the environment, with one name each.

The README's settings table is generated from ``SETTINGS`` (``python -m settings``), and a test
checks that ``local.settings.json.example`` and the Bicep declare the same names.
Connection settings follow the Functions identity-based convention (``<Conn>__fullyQualifiedNamespace``,
``__credential``, ``__clientId``) so the triggers and the SDK clients share one configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from domain.circuit import CircuitPolicy

Where = Literal["both", "azure", "local", "platform"]


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    meaning: str
    # "azure": only a deployed app sets it; "local": only local runs (emulators); "platform": App Service
    # sets it itself (never in the Bicep or local.settings.json)
    where: Where = "both"


SETTINGS: tuple[Setting, ...] = (
    # Connections
    Setting(
        "ServiceBusConnection__fullyQualifiedNamespace",
        "",
        "Service Bus namespace host name (identity-based connection, used in Azure).",
        where="azure",
    ),
    Setting(
        "ServiceBusConnection__credential",
        "",
        "`managedidentity` in Azure: the triggers and the SDK use the managed identity.",
        where="azure",
    ),
    Setting(
        "ServiceBusConnection__clientId",
        "",
        "Client id of the user-assigned managed identity for Service Bus.",
        where="azure",
    ),
    Setting(
        "ServiceBusConnection",
        "",
        "Service Bus connection string: local emulator only (production uses the identity).",
        where="local",
    ),
    Setting("COSMOS_ENDPOINT", "https://localhost:8081", "Cosmos DB account endpoint."),
    Setting(
        "COSMOS_KEY",
        "",
        "Cosmos DB key: local emulator only. Empty in Azure, where the managed identity is used.",
        where="local",
    ),
    Setting("COSMOS_DATABASE", "scheduler", "Cosmos DB database holding the `orders` and `state` containers."),
    Setting(
        "COSMOS_VERIFY_TLS", "true", "`false` only for the local emulator's self-signed certificate.", where="local"
    ),
    Setting(
        "AZURE_CLIENT_ID", "", "Client id of the user-assigned managed identity (Cosmos DB, telemetry).", where="azure"
    ),
    Setting(
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "",
        "Application Insights connection string; telemetry export is off when empty.",
    ),
    Setting(
        "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
        "",
        "`Authorization=AAD;ClientId=<id>`: telemetry authenticates with the managed identity.",
        where="azure",
    ),
    Setting(
        "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",
        "false",
        "`false`: the Python worker does not set up its own Azure Monitor export; the app does "
        "(observability/setup.py, docs/observability.md).",
    ),
    Setting(
        "PYTHON_ENABLE_OPENTELEMETRY",
        "true",
        "`true`: the worker tells the host that telemetry leaves from the worker, so the host (host.json "
        "`telemetryMode: OpenTelemetry`) does not export forwarded logs a second time.",
    ),
    # Intake and starter
    Setting("MAX_PENDING", "1000", "Submission rejects new orders while this many are Pending."),
    Setting("MAX_IN_FLIGHT", "200", "The starter claims nothing while this many orders are Processing."),
    Setting("STATE_COUNT_CACHE_SECONDS", "5", "How long the Pending/Processing counts behind the two caps are cached."),
    Setting(
        "START_GRACE_SECONDS",
        "60",
        "completeBy of a fresh claim: the orchestration must start its first step within this.",
    ),
    Setting("STARTER_BATCH_SIZE", "50", "Pending records the starter sweep claims per run at most."),
    Setting("STARTER_SCHEDULE", "*/20 * * * * *", "NCRONTAB schedule of the starter sweep (safety net)."),
    # Scheduler and agents
    Setting("STEP_TIMEOUT_SECONDS", "60", "Deadline of each workflow step (completeBy = step start + this)."),
    Setting("AGENT_MAX_ATTEMPTS", "4", "Calls an agent makes to its remote service per request, at most."),
    Setting("AGENT_RETRY_BASE_MS", "500", "First backoff of an agent's transient-failure retries (doubles)."),
    Setting("AGENT_RETRY_MAX_MS", "8000", "Cap of an agent's retry backoff."),
    Setting("INVENTORY_SERVICE_URL", "", "Real inventory service; empty = built-in simulator."),
    Setting("PAYMENT_SERVICE_URL", "", "Real payment service; empty = built-in simulator."),
    Setting("SHIPPING_SERVICE_URL", "", "Real shipping service; empty = built-in simulator."),
    Setting(
        "PAYMENT_BACKUP_SERVICE_URL",
        "",
        "Real second payment provider (the fallback agent `payment-backup`); empty = built-in simulator.",
    ),
    # Compensation and human review
    Setting(
        "REVIEW_AMOUNT_THRESHOLD_CENTS",
        "100000",
        "An order of at least this total pauses for human review instead of compensating on its own; 0 = never.",
    ),
    Setting(
        "REVIEW_TIMEOUT_SECONDS",
        "86400",
        "How long a paused order waits for the operator's ReviewDecision before the default action.",
    ),
    Setting(
        "REVIEW_DEFAULT_ACTION",
        "compensate",
        "What a review that times out does: `compensate`, `retry` (the step again) or `alternative` (its fallback).",
    ),
    # Supervisor
    Setting("SUPERVISOR_SCHEDULE", "*/30 * * * * *", "NCRONTAB schedule of the supervisor."),
    Setting("MAX_FAILURES", "3", "Failed attempts after which an order goes to Error and an operator is alerted."),
    Setting("RETRY_BACKOFF_BASE_SECONDS", "10", "Backoff before the first supervisor retry (doubles each time)."),
    Setting("RETRY_BACKOFF_MAX_SECONDS", "300", "Cap of the supervisor's retry backoff."),
    Setting("SUPERVISOR_MAX_RECORDS", "100", "Expired records one supervisor run recovers at most."),
    Setting("SUPERVISOR_PAGE_SIZE", "25", "Page size of the supervisor's scan."),
    Setting(
        "SUPERVISOR_WINDOW_MINUTES",
        "60",
        "The regular scan looks at completeBy no older than this; a catch-up pass takes the rest.",
    ),
    Setting("SUPERVISOR_CATCHUP_EVERY", "10", "Every Nth supervisor run also scans beyond the window."),
    # Dependency health (circuit breakers shared across orders, domain/circuit.py)
    Setting(
        "CIRCUIT_FAILURE_THRESHOLD",
        "8",
        "Consecutive transient failures of one remote service (any orders) that open its circuit.",
    ),
    Setting(
        "CIRCUIT_COOLDOWN_SECONDS",
        "30",
        "An open circuit lets a probe through after this long; doubles after each failed probe.",
    ),
    Setting("CIRCUIT_COOLDOWN_MAX_SECONDS", "240", "Cap of the doubling cool-down between probes."),
    Setting("CIRCUIT_PROBES", "1", "Calls a half-open circuit lets through at once to probe the service."),
    Setting(
        "MAX_OUTAGE_WAIT_MINUTES",
        "60",
        "How long an order waits out an open dependency (its retry budget untouched) before it escalates anyway.",
    ),
    # Deferral (out-of-order messages on the orders queue)
    Setting(
        "DEFER_RETRY_DELAY_SECONDS",
        "30",
        "A message deferred because a dependency was unavailable is tried again this long after (RetryDeferred).",
    ),
    Setting(
        "DEFER_MAX_ROUNDS",
        "3",
        "RetryDeferred rounds of a message whose dependency stays unavailable before it is dead-lettered "
        "(each fetch counts as a delivery: fewer than the queue's max delivery count).",
    ),
    Setting("PEEK_SWEEP_SCHEDULE", "0 */5 * * * *", "NCRONTAB schedule of the peek sweep over deferred messages."),
    Setting(
        "PEEK_SWEEP_AGE_MINUTES",
        "10",
        "The peek sweep looks only at deferred messages enqueued at least this long ago.",
    ),
    Setting("PEEK_SWEEP_MAX_MESSAGES", "500", "Messages one peek sweep run peeks at most."),
    # Operator API and console (operations/)
    Setting(
        "WEBSITE_AUTH_ENABLED",
        "",
        "Set by App Service itself (never by you) to `True` when its authentication (Easy Auth) is on; "
        "without it the ops API refuses every request.",
        where="platform",
    ),
    Setting(
        "WEBSITE_SITE_NAME",
        "",
        "Set by App Service itself: the app's name. When set, `OPS_LOCAL_PRINCIPAL` is ignored.",
        where="platform",
    ),
    Setting(
        "OPS_LOCAL_PRINCIPAL",
        "",
        "Local development only: the operator the ops API acts as, `name:Orders.Read,Orders.Operate`; empty = "
        "every request refused. Ignored on App Service and when platform authentication is on.",
        where="local",
    ),
)

_DEFAULTS: dict[str, str] = {s.name: s.default for s in SETTINGS}


class SettingsError(ValueError):
    """A setting has a value the app cannot use."""


@dataclass(frozen=True)
class Settings:
    """Typed view of the app settings. Build it with ``Settings.from_env()``."""

    values: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> Settings:
        source = os.environ if env is None else env
        values = {name: source.get(name, default) for name, default in _DEFAULTS.items()}
        for key, value in overrides.items():
            if key not in _DEFAULTS:
                raise SettingsError(f"unknown setting {key!r}")
            values[key] = value
        return cls(values)

    def raw(self, name: str) -> str:
        if name not in _DEFAULTS:
            raise SettingsError(f"unknown setting {name!r}")
        return self.values.get(name, _DEFAULTS[name])

    def _int(self, name: str, minimum: int = 0) -> int:
        text = self.raw(name)
        try:
            value = int(text)
        except ValueError:
            raise SettingsError(f"{name} must be an integer, got {text!r}") from None
        if value < minimum:
            raise SettingsError(f"{name} must be >= {minimum}, got {value}")
        return value

    def _bool(self, name: str) -> bool:
        return self.raw(name).strip().lower() not in ("false", "0", "no", "")

    # Intake and starter
    @property
    def max_pending(self) -> int:
        return self._int("MAX_PENDING", 1)

    @property
    def max_in_flight(self) -> int:
        return self._int("MAX_IN_FLIGHT", 1)

    @property
    def state_count_cache(self) -> timedelta:
        return timedelta(seconds=self._int("STATE_COUNT_CACHE_SECONDS"))

    @property
    def start_grace(self) -> timedelta:
        return timedelta(seconds=self._int("START_GRACE_SECONDS", 1))

    @property
    def starter_batch_size(self) -> int:
        return self._int("STARTER_BATCH_SIZE", 1)

    # Scheduler and agents
    @property
    def step_timeout(self) -> timedelta:
        return timedelta(seconds=self._int("STEP_TIMEOUT_SECONDS", 1))

    @property
    def agent_max_attempts(self) -> int:
        return self._int("AGENT_MAX_ATTEMPTS", 1)

    @property
    def agent_retry_base(self) -> timedelta:
        return timedelta(milliseconds=self._int("AGENT_RETRY_BASE_MS"))

    @property
    def agent_retry_max(self) -> timedelta:
        return timedelta(milliseconds=self._int("AGENT_RETRY_MAX_MS"))

    def service_url(self, service: str) -> str:
        return self.raw(f"{service.upper()}_SERVICE_URL")

    # Compensation and human review
    @property
    def review_amount_threshold_cents(self) -> int:
        return self._int("REVIEW_AMOUNT_THRESHOLD_CENTS")

    @property
    def review_timeout(self) -> timedelta:
        return timedelta(seconds=self._int("REVIEW_TIMEOUT_SECONDS", 1))

    @property
    def review_default_action(self) -> str:
        value = self.raw("REVIEW_DEFAULT_ACTION").strip().lower()
        if value not in ("compensate", "retry", "alternative"):
            raise SettingsError(f"REVIEW_DEFAULT_ACTION must be compensate, retry or alternative, got {value!r}")
        return value

    # Supervisor
    @property
    def max_failures(self) -> int:
        return self._int("MAX_FAILURES", 1)

    @property
    def retry_backoff_base(self) -> timedelta:
        return timedelta(seconds=self._int("RETRY_BACKOFF_BASE_SECONDS"))

    @property
    def retry_backoff_max(self) -> timedelta:
        return timedelta(seconds=self._int("RETRY_BACKOFF_MAX_SECONDS"))

    @property
    def supervisor_max_records(self) -> int:
        return self._int("SUPERVISOR_MAX_RECORDS", 1)

    @property
    def supervisor_page_size(self) -> int:
        return self._int("SUPERVISOR_PAGE_SIZE", 1)

    @property
    def supervisor_window(self) -> timedelta:
        return timedelta(minutes=self._int("SUPERVISOR_WINDOW_MINUTES", 1))

    @property
    def supervisor_catchup_every(self) -> int:
        return self._int("SUPERVISOR_CATCHUP_EVERY", 1)

    # Dependency health
    @property
    def circuit_policy(self) -> CircuitPolicy:
        from domain.circuit import CircuitPolicy

        cooldown = timedelta(seconds=self._int("CIRCUIT_COOLDOWN_SECONDS", 1))
        return CircuitPolicy(
            threshold=self._int("CIRCUIT_FAILURE_THRESHOLD", 1),
            cooldown=cooldown,
            cooldown_max=max(cooldown, timedelta(seconds=self._int("CIRCUIT_COOLDOWN_MAX_SECONDS", 1))),
            probes=self._int("CIRCUIT_PROBES", 1),
        )

    @property
    def max_outage_wait(self) -> timedelta:
        return timedelta(minutes=self._int("MAX_OUTAGE_WAIT_MINUTES"))

    # Deferral
    @property
    def defer_retry_delay(self) -> timedelta:
        return timedelta(seconds=self._int("DEFER_RETRY_DELAY_SECONDS", 1))

    @property
    def defer_max_rounds(self) -> int:
        return self._int("DEFER_MAX_ROUNDS", 1)

    @property
    def peek_sweep_age(self) -> timedelta:
        return timedelta(minutes=self._int("PEEK_SWEEP_AGE_MINUTES"))

    @property
    def peek_sweep_max_messages(self) -> int:
        return self._int("PEEK_SWEEP_MAX_MESSAGES", 1)

    # Connections
    @property
    def cosmos_endpoint(self) -> str:
        return self.raw("COSMOS_ENDPOINT")

    @property
    def cosmos_key(self) -> str:
        return self.raw("COSMOS_KEY")

    @property
    def cosmos_database(self) -> str:
        return self.raw("COSMOS_DATABASE")

    @property
    def cosmos_verify_tls(self) -> bool:
        return self._bool("COSMOS_VERIFY_TLS")


def settings_table() -> str:
    """The README's settings table, in Markdown."""
    lines = ["| name | meaning | default |", "|---|---|---|"]
    for s in SETTINGS:
        default = f"`{s.default}`" if s.default else "(empty)"
        lines.append(f"| `{s.name}` | {s.meaning} | {default} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(settings_table())
