"""App settings: every value the code reads from the environment, with one name each.

The settings table in ``docs/settings.md`` is generated from ``SETTINGS`` (``python -m settings``), and a test
checks that ``local.settings.json.example`` and the Bicep declare the same names.
Connection settings follow the Functions identity-based convention (``<Conn>__fullyQualifiedNamespace``,
``__credential``, ``__clientId``) so the triggers and the SDK clients share one configuration.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from contracts.names import QUEUE_DUPLICATE_DETECTION_MINUTES, QUEUE_MESSAGE_TTL_DAYS
from domain.ncrontab import NcrontabExpression

if TYPE_CHECKING:
    from domain.circuit import CircuitPolicy

Where = Literal["both", "azure", "local", "platform"]


@dataclass(frozen=True)
class Kind[T]:
    """How the text of a setting is read: ``read`` returns the typed value, or None for a text it refuses."""

    expected: str  # what a valid value looks like, for the start-up error
    read: Callable[[str], T | None]
    # Values it refuses (the settings tests try each on every setting of this kind); empty: any text is valid.
    refuses: tuple[str, ...] = ()


def _integer(text: str, minimum: int) -> int | None:
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= minimum else None


def count(minimum: int, maximum: int | None = None) -> Kind[int]:
    if maximum is None:
        return Kind(f"an integer >= {minimum}", lambda text: _integer(text, minimum), ("x", "1.5", str(minimum - 1)))

    def read(text: str) -> int | None:
        value = _integer(text, minimum)
        return None if value is None or value > maximum else value

    return Kind(f"an integer from {minimum} to {maximum}", read, ("x", "1.5", str(minimum - 1), str(maximum + 1)))


# The largest page size (``x-ms-max-item-count``) and ``TOP`` count of a Cosmos DB query: the page size is a 32-bit
# integer as the service's SDKs type it (``MaxItemCount`` is an ``int?``,
# https://learn.microsoft.com/dotnet/api/microsoft.azure.cosmos.queryrequestoptions.maxitemcount), and the
# service's query plan holds TOP as an unsigned 32-bit number (Azure/azure-cosmos-dotnet-v3#4939). The Python SDK
# sends any number it is given, and the local protocol server takes it: a larger one failed no test.
MAX_PAGE_SIZE = 2**31 - 1


# The longest duration a setting may hold: the app adds one to the current moment (a step's deadline, a start's
# grace, a backoff), and the sum must be a moment it can write (``domain.timefmt``: the years 1000 to 9998). Past
# ``timedelta``'s range a value raised OverflowError at start-up instead of a SettingsError naming it; within it,
# 31,700 years of ``STEP_TIMEOUT_SECONDS`` failed every attempt ("date value out of range").
MAX_DURATION = timedelta(days=36_500)


def _duration(unit: str, minimum: int, most: int | None = None, what: str = "100 years") -> Kind[timedelta]:
    """``most``: the largest number of units taken (default: ``MAX_DURATION``); ``what`` says why."""
    most = MAX_DURATION // timedelta(**{unit: 1}) if most is None else most

    def read(text: str) -> timedelta | None:
        value = _integer(text, minimum)
        return None if value is None or value > most else timedelta(**{unit: value})

    return Kind(
        f"a whole number of {unit} from {minimum} to {most} ({what})",
        read,
        ("x", "1.5", str(minimum - 1), str(most + 1), str(10**20)),
    )


def seconds(minimum: int) -> Kind[timedelta]:
    return _duration("seconds", minimum)


def minutes(minimum: int) -> Kind[timedelta]:
    return _duration("minutes", minimum)


# How long the queues keep a message, deferred or not, before dead-lettering it (``TTLExpiredException``):
# a deferred message is never there to look at, or fetch, any later (infra/modules/servicebus.bicep).
MESSAGE_TTL = timedelta(days=QUEUE_MESSAGE_TTL_DAYS)


def minutes_under_message_ttl(minimum: int) -> Kind[timedelta]:
    most = MESSAGE_TTL // timedelta(minutes=1) - 1
    return _duration("minutes", minimum, most, f"under the queues' message time to live, {QUEUE_MESSAGE_TTL_DAYS} days")


# How long the Functions host renews a Service Bus message's lock while its invocation runs (host.json
# ``maxAutoLockRenewalDuration``; tests/infra checks they agree). An invocation still running after it loses
# the lock (QUEUE_LOCK_DURATION_SECONDS later at most), and Service Bus delivers the message to another one.
LOCK_RENEWAL = timedelta(minutes=5)
# What the host may run at once on one instance that takes a thread of the Python worker's pool for sync functions
# (``PYTHON_THREADPOOL_THREAD_COUNT``; azure_functions_runtime's ``handle_event`` runs a sync function in
# ``run_in_executor`` on that pool, and unset the pool is ``ThreadPoolExecutor``'s default, ``min(32, cores + 4)``:
# 5 on one core). Each sync Service Bus trigger (the agents' request queues) up to host.json's serviceBus
# ``maxConcurrentCalls``, activities up to durableTask ``maxConcurrentActivityFunctions``, and HTTP requests (the ops
# routes) up to the Flex instance's ``perInstanceConcurrency`` (infra/modules/functionapp.bicep); tests/infra checks
# they agree. An invocation the host handed over that waits for a thread has its lock renewal and functionTimeout
# running meanwhile (docs/settings.md, "The worker's threads").
SERVICE_BUS_MAX_CONCURRENT_CALLS = 16
MAX_CONCURRENT_ACTIVITIES = 40
HTTP_PER_INSTANCE_CONCURRENCY = 16


def _request_queue_names() -> list[str]:
    from domain.workflow import request_queues

    return list(request_queues().values())


def sync_concurrency() -> int:
    """How many sync invocations one instance's host may hand the worker at once."""
    sync_triggers = len(_request_queue_names()) * SERVICE_BUS_MAX_CONCURRENT_CALLS
    return sync_triggers + MAX_CONCURRENT_ACTIVITIES + HTTP_PER_INSTANCE_CONCURRENCY


# The longest one call to a remote service takes before it is given up (``adapters.remote.http_service``).
REMOTE_CALL_TIMEOUT = timedelta(seconds=10)
# The whole of one Service Bus send, the SDK's retries included (``adapters.servicebus.sender``): an agent's reply
# is sent in the invocation that made its calls, within the same lock.
SEND_TIMEOUT = timedelta(seconds=30)
# The longest one Durable client call of the app takes (``adapters.durable_client``): the SDK's own bound is 240 s,
# past the 230 s the front end gives an HTTP-triggered function to answer, and a call that reaches it closes the
# SDK's one session, failing the worker's other calls in flight; one the app gives up is cancelled instead.
DURABLE_CALL_TIMEOUT = timedelta(seconds=20)
# One token request to the managed identity endpoint (``IDENTITY_ENDPOINT``, which App Service and Flex Consumption
# give the app): the connection within the first, the answer within the second, and azure-identity tries a request 4
# times (about 25 s at most). Its own bound was azure-core's transport default, 300 s to read: a request the endpoint
# took and never answered held its caller 5 minutes a try, about 20 minutes in all, while the first invocation built
# the clients (every other one of the worker waiting) or inside a Cosmos DB call or a Service Bus send renewing a
# token (tests/identity). The endpoint answers in milliseconds, or a second when it asks Entra ID itself.
IDENTITY_CONNECT_TIMEOUT = timedelta(seconds=2)
IDENTITY_READ_TIMEOUT = timedelta(seconds=5)


def identity_transport() -> dict[str, Any]:
    """The keyword arguments that bound a credential's token requests (``IDENTITY_CONNECT_TIMEOUT``,
    ``IDENTITY_READ_TIMEOUT``): ``azure.identity``'s credentials hand them to their transport."""
    return {
        "connection_timeout": IDENTITY_CONNECT_TIMEOUT.total_seconds(),
        "read_timeout": IDENTITY_READ_TIMEOUT.total_seconds(),
    }


def agent_request_longest(step_timeout: timedelta, max_calls: int, retry_max: timedelta) -> timedelta:
    """The longest an agent spends on one request (``order_agents.runtime.run_agent_request``): its calls and
    backoffs stop at the request's deadline, at most ``step_timeout`` away, but a call begun before it may run
    its timeout past it; and there are at most ``max_calls`` calls with a backoff of at most ``retry_max``
    between two; then the reply's send, up to ``SEND_TIMEOUT``. Counted in whole microseconds: a count setting
    may be larger than a ``timedelta`` holds."""
    micro = timedelta(microseconds=1)
    by_deadline = (step_timeout + REMOTE_CALL_TIMEOUT) // micro
    by_calls = max_calls * (REMOTE_CALL_TIMEOUT // micro) + (max_calls - 1) * (retry_max // micro)
    return timedelta(microseconds=min(by_deadline, by_calls)) + SEND_TIMEOUT


def days(minimum: int) -> Kind[timedelta]:
    return _duration("days", minimum)


def milliseconds(minimum: int) -> Kind[timedelta]:
    return _duration("milliseconds", minimum)


def choice(*options: str) -> Kind[str]:
    def read(text: str) -> str | None:
        value = text.strip().lower()
        return value if value in options else None

    return Kind("one of " + ", ".join(options), read, ("", "sometimes"))


def _bool(text: str) -> bool | None:
    return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(text.strip().lower())


# How the Functions worker reads a boolean setting it reads itself (azure_functions_runtime's
# ``is_true_like``): these are true and any other text is false. The app takes the same true values and
# refuses a text that is neither these nor a plain false, which the worker would quietly read as false.
WORKER_TRUE = frozenset({"1", "true", "t", "yes", "y"})
WORKER_FALSE = frozenset({"0", "false", "f", "no", "n"})


def _worker_bool(text: str) -> bool | None:
    value = text.strip().lower()
    return True if value in WORKER_TRUE else False if value in WORKER_FALSE else None


def _url(text: str) -> str | None:
    """An http(s) URL the app can call: checked here as ``urllib`` and the SDKs read it when they call (a port out
    of range or not a number, no host, an unclosed ``[``, an empty label raised then, on every call: the
    ``ValueError`` of ``http://[::1`` escaped the agent's trigger until ``MaxDeliveryCountExceeded``). Visible
    ASCII only (a host in another script is written in punycode, ``xn--``), and no query or fragment: the app
    appends ``/<action>`` to it."""
    value = text.strip()
    if not value.startswith(("http://", "https://")) or not all("!" <= c <= "~" for c in value):
        return None  # the scheme as the remote adapter checks it (``HTTPS://`` is refused there)
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port  # ``port`` raises ValueError for one out of range or not a number
        if not host:
            return None
        shown = f"[{host}]" if ":" in host else host
        if parts.netloc.rpartition("@")[2].lower() not in (shown, f"{shown}:{port}"):
            return None  # anything else beside the host (``[::1]x``), which ``urlsplit`` passes over
        if ":" not in host:
            host.encode("idna")  # an empty or over-long label: UnicodeError (a ValueError)
    except ValueError:
        return None
    return value if not parts.query and not parts.fragment else None


def _optional_url(text: str) -> str | None:
    return "" if not text.strip() else _url(text)


# The most days each month has (February's 29th comes in leap years).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _ncrontab(text: str) -> str | None:
    # The Functions host's six-field NCRONTAB ({second} {minute} {hour} {day} {month} {day-of-week}). The host
    # reads the schedules itself (%NAME% in the timer bindings); reading them here (``domain.ncrontab``, as
    # SUPERVISOR_SCHEDULE is) makes a bad one fail when the app starts, as every other setting does, instead of
    # only putting that timer in error: its shape alone let ``99 * * * * *`` through, and with the starter's
    # timer in error the orders over MAX_IN_FLIGHT stayed Pending for good. One that never fires (31 February)
    # is refused too.
    try:
        expression = NcrontabExpression.parse(text)
    except ValueError:
        return None
    fires = any(day <= _MONTH_DAYS[month - 1] for month in expression.months for day in expression.days)
    return text if fires else None


def frequent_ncrontab(max_gap_minutes: int) -> Kind[str]:
    """An NCRONTAB schedule proved to fire at least every ``max_gap_minutes``: every hour of every day alike
    (hour, day, month and day of week take every value) and no longer than that between two of its (minute,
    second) firings, the wait from an hour's last firing to the next hour's first included. A schedule it
    cannot read, or whose gaps depend on the calendar, is refused."""
    limit = timedelta(minutes=max_gap_minutes)

    def read(text: str) -> str | None:
        try:
            gap = NcrontabExpression.parse(text).longest_gap()
        except ValueError:
            return None
        return text if gap is not None and gap <= limit else None

    return Kind(
        "a six-field NCRONTAB expression ({second} {minute} {hour} {day} {month} {day-of-week}) that fires at least "
        f"every {max_gap_minutes} minutes: every value (`*`) in hour, day, month and day-of-week, and at most "
        f"{max_gap_minutes} minutes between the firings the second and minute fields give, from an hour's last to "
        "the next hour's first too (e.g. `*/30 * * * * *`, `0 */5 * * * *`)",
        read,
        ("", "*/5 * * * *", "every minute", "x * * * * *", "0 0 * * * *", "0 */5 9-17 * * *", "0 */5 * * * 1-5"),
    )


# What Cosmos DB refuses in a resource id (and the SDK puts the name in the request's path as it is: ``/``
# adds a segment, ``?`` and ``#`` cut the path short).
_NOT_IN_NAMES = frozenset("/\\?#")
MAX_NAME_CHARS = 255


def _name(text: str) -> str | None:
    """A Cosmos DB resource name: 1 to 255 characters, no surrounding spaces, none of ``/ \\ ? #`` and no control
    character or line break."""
    if not text.strip() or text != text.strip() or len(text) > MAX_NAME_CHARS:
        return None
    if any(c in _NOT_IN_NAMES or not c.isprintable() for c in text):
        return None
    return text


_LOWER_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _connection_string(text: str) -> str | None:
    """Empty (nothing exported), or an Application Insights connection string read as the Azure Monitor exporter
    reads it (``azure.monitor.opentelemetry.exporter._connection_string_parser``): ``key=value`` pairs split by
    ``;`` (one ``=`` each), a lowercase UUID ``InstrumentationKey``, no ``Authorization`` but ``ikey``, and its
    endpoints URLs. The exporter refused the others with a ValueError naming no setting, or (a bad endpoint)
    started and failed every export."""
    if text == "":
        return text
    pairs: dict[str, str] = {}
    for pair in text.split(";"):
        name, sep, value = pair.partition("=")
        if not sep or "=" in value:
            return None
        pairs[name.lower()] = value
    key = pairs.get("instrumentationkey")
    if key is None or not _LOWER_UUID.fullmatch(key):
        return None
    if pairs.get("authorization", "ikey").lower() != "ikey":
        return None
    endpoints = [value for name, value in pairs.items() if name in ("ingestionendpoint", "liveendpoint")]
    return text if all(_url(endpoint) for endpoint in endpoints) else None


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def authentication_pairs(text: str) -> dict[str, str] | None:
    """The pairs of an ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING`` (keys lower-cased; empty: none), or None for a
    text the Functions host and the Azure Monitor exporter would not both read alike: ``Authorization=AAD``, and
    ``ClientId=<uuid>`` for a user-assigned identity (without it, the system-assigned one), split by ``;``. The host
    (``TokenCredentialOptions.ParseAuthenticationString``) takes keys and ``AAD`` in any case and trims spaces; the
    exporter (``export._base._get_authentication_credential``) takes ``AAD`` alone, trims nothing and, on an empty
    pair or a second ``=``, logs an error and exports without a credential (refused by Application Insights with
    local authentication off)."""
    if text == "":
        return {}
    pairs: dict[str, str] = {}
    for pair in text.split(";"):
        name, sep, value = pair.partition("=")
        key = name.lower()
        if not sep or "=" in value or key in pairs or key not in ("authorization", "clientid"):
            return None
        pairs[key] = value
    client_id = pairs.get("clientid")
    if pairs.get("authorization") != "AAD" or (client_id is not None and not _UUID.fullmatch(client_id)):
        return None
    return pairs


def _authentication_string(text: str) -> str | None:
    return text if authentication_pairs(text) is not None else None


def _base64_key(text: str) -> str | None:
    """Empty, or a key the Cosmos DB SDK can sign with (base64: its client's constructor decodes it, and the
    client is built on the first invocation, where a key that is not raised ``binascii.Error`` in every one)."""
    if text == "":
        return text
    try:
        base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error
        return None
    return text


TEXT: Kind[str] = Kind("any text", lambda text: text)


def _thread_count(text: str) -> int | None:
    """Empty (0: the worker's default pool), or a thread count as azure_functions_runtime reads it (``int``, at
    least 1; it logs a warning for any other text and keeps its default)."""
    return 0 if text == "" else _integer(text, 1)


THREAD_COUNT: Kind[int] = Kind(
    "empty (the worker's default, min(32, cores + 4)) or an integer >= 1", _thread_count, (" ", "x", "1.5", "0")
)
AUTHENTICATION_STRING: Kind[str] = Kind(
    "empty, `Authorization=AAD` or `Authorization=AAD;ClientId=<client id, a UUID>`",
    _authentication_string,
    (
        "Authorization=Key",
        "Authorization=aad",
        "Authorization=AAD;",
        " Authorization=AAD",
        "ClientId=11111111-2222-3333-4444-555555555555",
        "Authorization=AAD;ClientId=not-a-uuid",
        "Authorization=AAD;ClientId= 11111111-2222-3333-4444-555555555555",
    ),
)
BASE64_KEY: Kind[str] = Kind("empty, or a base64 key (as the Cosmos DB emulator's)", _base64_key, (" ", "abc", "a b="))
CONNECTION_STRING: Kind[str] = Kind(
    "empty, or an Application Insights connection string (`InstrumentationKey=<lowercase uuid>;...`, "
    "`key=value` pairs split by `;`, its endpoints http(s) URLs)",
    _connection_string,
    (" ", "garbage", "InstrumentationKey=not-a-guid", f"InstrumentationKey={'0' * 8}-{'0' * 4}-{'0' * 4}-{'0' * 4}-x"),
)
NAME: Kind[str] = Kind(
    "a Cosmos DB resource name: 1 to 255 characters without surrounding spaces, none of / \\ ? # "
    "or a control character",
    _name,
    ("", " scheduler", "sched/uler", "sched#uler", "x" * 256),
)
BOOL: Kind[bool] = Kind("true or false", _bool, ("", "maybe"))
# a setting the Functions worker reads itself: its true values ("on" would be false to the worker: refused)
WORKER_BOOL: Kind[bool] = Kind(
    "true or false (read as the Functions worker reads it: also 1, t, y, yes; 0, f, n, no)", _worker_bool, ("", "on")
)
_BAD_URLS = ("localhost:8081", "ftp://host", "http://[::1", "http://127.0.0.1:99999", "http://a..b", "http://h/?x=1")
URL: Kind[str] = Kind("an http:// or https:// URL", _url, ("", *_BAD_URLS))
OPTIONAL_URL: Kind[str] = Kind("empty or an http:// or https:// URL", _optional_url, _BAD_URLS)
NCRONTAB: Kind[str] = Kind(
    "a six-field NCRONTAB expression ({second} {minute} {hour} {day} {month} {day-of-week}) of numbers, `*`, "
    "ranges, lists and steps (no names: 1-5, not MON-FRI) that fires on some day of the year",
    _ncrontab,
    ("", "*/5 * * * *", "every minute", "99 * * * * *", "0 0 0 31 2 *"),
)
# What azure-identity's ``DefaultAzureCredential`` takes in ``AZURE_TOKEN_CREDENTIALS``, read by the SDK itself, any
# case (``azure.identity._internal.utils.process_credential_exclusions``, 1.27): ``dev``, ``prod`` or one credential's
# class name. Any other text raises ValueError from the first client the app builds; the app refuses it at start-up.
TOKEN_CREDENTIALS = frozenset(
    {
        "dev",
        "prod",
        "environmentcredential",
        "workloadidentitycredential",
        "managedidentitycredential",
        "visualstudiocodecredential",
        "azureclicredential",
        "azuredeveloperclicredential",
        "azurepowershellcredential",
        "interactivebrowsercredential",
    }
)


def _token_credentials(text: str) -> str | None:
    value = text.strip().lower()
    return value if not value or value in TOKEN_CREDENTIALS else None


TOKEN_CREDENTIALS_KIND: Kind[str] = Kind(
    "empty (every credential in turn), dev, prod or one credential's class name (ManagedIdentityCredential, ...)",
    _token_credentials,
    ("sometimes", "ManagedIdentity", "prod,dev"),
)
# Set by App Service, not by us: "True" when Easy Auth is on; any other text means off (never refused, so a
# platform value we do not know cannot stop the app).
PLATFORM_FLAG: Kind[bool] = Kind("`True` or anything else", lambda text: text.strip().lower() == "true")


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    meaning: str
    # "azure": only a deployed app sets it; "local": only local runs (emulators); "platform": App Service
    # sets it itself (never in the Bicep or local.settings.json)
    where: Where = "both"
    kind: Kind[Any] = TEXT
    # The value the Bicep, the azd hooks and local.settings.json.example write when it is not ``default``: a
    # setting the Functions worker reads itself, whose own default (``default``) is not what the app needs, or one
    # a deployment needs and a local run does not (``SUPERVISOR_GRACE_SECONDS``: many hosts' clocks in Azure).
    deployed: str | None = None

    @property
    def written(self) -> str:
        """The value the Bicep, the azd hooks and local.settings.json.example write."""
        return self.default if self.deployed is None else self.deployed

    def parse(self, text: str) -> Any:
        """The typed value of ``text``, or SettingsError naming this setting and what it expects."""
        value = self.kind.read(text)
        if value is None:
            raise SettingsError(f"{self.name}={text!r} is not valid: expected {self.kind.expected}")
        return value


SETTINGS: tuple[Setting, ...] = (
    # Connections
    Setting(
        "ServiceBusConnection__fullyQualifiedNamespace",
        "",
        "Service Bus namespace host name (identity-based connection, used in Azure).",
        where="azure",
        kind=TEXT,
    ),
    Setting(
        "ServiceBusConnection__credential",
        "",
        "`managedidentity` in Azure: the triggers and the SDK use the managed identity.",
        where="azure",
        kind=TEXT,
    ),
    Setting(
        "ServiceBusConnection__clientId",
        "",
        "Client id of the user-assigned managed identity for Service Bus.",
        where="azure",
        kind=TEXT,
    ),
    Setting(
        "ServiceBusConnection",
        "",
        "Service Bus connection string: local emulator only (production uses the identity).",
        where="local",
        kind=TEXT,
    ),
    Setting("COSMOS_ENDPOINT", "https://localhost:8081", "Cosmos DB account endpoint.", kind=URL),
    Setting(
        "COSMOS_KEY",
        "",
        "Cosmos DB key: local emulator only. Empty in Azure, where the managed identity is used.",
        where="local",
        kind=BASE64_KEY,
    ),
    Setting(
        "COSMOS_DATABASE", "scheduler", "Cosmos DB database holding the `orders` and `state` containers.", kind=NAME
    ),
    Setting(
        "COSMOS_VERIFY_TLS",
        "true",
        "`false` only for the local emulator's self-signed certificate.",
        where="local",
        kind=BOOL,
    ),
    Setting(
        "AZURE_CLIENT_ID",
        "",
        "Client id of the user-assigned managed identity the Cosmos DB client signs in with.",
        where="azure",
        kind=TEXT,
    ),
    Setting(
        "AZURE_TOKEN_CREDENTIALS",
        "",
        "Which credential the app's Cosmos DB and Service Bus clients use (azure-identity reads it): "
        "`ManagedIdentityCredential` in Azure, so a token comes from the managed identity or the error says why; "
        "empty locally, where the Azure CLI sign-in answers.",
        where="azure",
        kind=TOKEN_CREDENTIALS_KIND,
        deployed="ManagedIdentityCredential",
    ),
    Setting(
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "",
        "Application Insights connection string; telemetry export is off when empty.",
        kind=CONNECTION_STRING,
    ),
    Setting(
        "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
        "",
        "`Authorization=AAD;ClientId=<id>`: telemetry authenticates with the user-assigned managed identity "
        "`<id>` (`Authorization=AAD` alone: the system-assigned one), as the host and the worker's exporter read it.",
        where="azure",
        kind=AUTHENTICATION_STRING,
    ),
    Setting(
        "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",
        "false",
        "`false`: the Python worker does not set up its own Azure Monitor export; the app does "
        "(observability/setup.py, docs/observability.md).",
        kind=WORKER_BOOL,
    ),
    Setting(
        "PYTHON_ENABLE_OPENTELEMETRY",
        "false",
        "The Bicep, the azd hooks and local.settings.json.example set `true`: the worker tells the host that "
        "telemetry leaves from the worker, so the host (host.json `telemetryMode: OpenTelemetry`) does not export "
        "forwarded logs a second time. Unset (the worker's own default) or `false`: the host exports them, without "
        "custom dimensions, and the app exports traces and metrics only (docs/observability.md).",
        kind=WORKER_BOOL,
        deployed="true",
    ),
    Setting(
        "PYTHON_THREADPOOL_THREAD_COUNT",
        "",
        "Threads of the Python worker's pool for sync functions (the agents' triggers, every activity, the sync ops "
        "routes). The Bicep, the azd hooks and local.settings.json.example set the sync concurrency host.json and the "
        "Flex HTTP concurrency allow one instance (3 request queues x maxConcurrentCalls 16 + "
        "maxConcurrentActivityFunctions 40 + perInstanceConcurrency 16 = 104), which a value set here must cover; it "
        "also sizes the pool of the async functions' blocking work (`dependencies.size_blocking_pool`). Unset (the "
        "worker's own default): `min(32, cores + 4)`, 5 on one core, and an invocation waits for a thread while its "
        'lock renewal and functionTimeout run (docs/settings.md, "The worker\'s threads").',
        kind=THREAD_COUNT,
        deployed="104",
    ),
    # Intake and starter
    Setting("MAX_PENDING", "1000", "Submission rejects new orders while this many are Pending.", kind=count(1)),
    Setting(
        "MAX_IN_FLIGHT",
        "200",
        "While this many orders are Processing (a cached count), a new order is written Pending instead of claimed "
        "and the starter claims nothing. An order paused for review is Processing: it holds its place until answered "
        "or `REVIEW_TIMEOUT_SECONDS`.",
        kind=count(1),
    ),
    Setting(
        "STATE_COUNT_CACHE_SECONDS",
        "5",
        "How long the Pending/Processing counts behind the two caps are cached.",
        kind=seconds(0),
    ),
    Setting(
        "START_GRACE_SECONDS",
        "60",
        "completeBy of a fresh claim: the orchestration must start its first step within this.",
        kind=seconds(1),
    ),
    Setting(
        "STARTER_BATCH_SIZE",
        "50",
        "Pending records the starter sweep claims per run at most.",
        kind=count(1, MAX_PAGE_SIZE),  # its query's TOP
    ),
    Setting(
        "STARTER_SCHEDULE", "*/20 * * * * *", "NCRONTAB schedule of the starter sweep (safety net).", kind=NCRONTAB
    ),
    # Scheduler and agents
    Setting(
        "STEP_TIMEOUT_SECONDS",
        "60",
        "Deadline of each workflow step (completeBy = step start + this).",
        kind=seconds(1),
    ),
    Setting(
        "AGENT_MAX_ATTEMPTS", "4", "Calls an agent makes to its remote service per request, at most.", kind=count(1)
    ),
    Setting(
        "AGENT_RETRY_BASE_MS",
        "500",
        "First backoff of an agent's transient-failure retries (doubles).",
        kind=milliseconds(0),
    ),
    Setting("AGENT_RETRY_MAX_MS", "8000", "Cap of an agent's retry backoff.", kind=milliseconds(0)),
    Setting("INVENTORY_SERVICE_URL", "", "Real inventory service; empty = built-in simulator.", kind=OPTIONAL_URL),
    Setting("PAYMENT_SERVICE_URL", "", "Real payment service; empty = built-in simulator.", kind=OPTIONAL_URL),
    Setting("SHIPPING_SERVICE_URL", "", "Real shipping service; empty = built-in simulator.", kind=OPTIONAL_URL),
    Setting(
        "PAYMENT_BACKUP_SERVICE_URL",
        "",
        "Real second payment provider (the fallback agent `payment-backup`); empty = built-in simulator.",
        kind=OPTIONAL_URL,
    ),
    # Compensation and human review
    Setting(
        "REVIEW_AMOUNT_THRESHOLD_CENTS",
        "100000",
        "An order of at least this total pauses for human review instead of compensating on its own; 0 = never.",
        kind=count(0),
    ),
    Setting(
        "REVIEW_TIMEOUT_SECONDS",
        "86400",
        "How long a paused order waits for the operator's ReviewDecision before the default action.",
        kind=seconds(1),
    ),
    Setting(
        "REVIEW_DEFAULT_ACTION",
        "compensate",
        "What a review that times out does: `compensate`, `retry` (the step again) or `alternative` (its "
        "fallback; `fail` where none can take over: a step without one, a prepaid order's payment).",
        kind=choice("compensate", "retry", "alternative"),
    ),
    # Supervisor
    Setting(
        "SUPERVISOR_SCHEDULE",
        "*/30 * * * * *",
        f"NCRONTAB schedule of the supervisor; must fire at least every {QUEUE_DUPLICATE_DETECTION_MINUTES} minutes "
        "(hour, day, month and day-of-week `*`), or its hourly alerts skip hours.",
        # Its hourly alerts and resends (notifications.alerts.hourly_slice) go out only in the first duplicate
        # window of each hour: a run must fall in every such window.
        kind=frequent_ncrontab(QUEUE_DUPLICATE_DETECTION_MINUTES),
    ),
    Setting(
        "MAX_FAILURES",
        "3",
        "Failed attempts after which the supervisor stops retrying an order: it compensates the steps done, or "
        "sends it to Error with an operator alert (nothing to undo, past the pivot, or high impact); also the "
        "stuck compensation rounds before CompensationFailed.",
        kind=count(1),
    ),
    Setting(
        "RETRY_BACKOFF_BASE_SECONDS",
        "10",
        "Backoff before the first supervisor retry (doubles each time up to RETRY_BACKOFF_MAX_SECONDS; each drawn "
        "between half and all of it).",
        kind=seconds(0),
    ),
    Setting("RETRY_BACKOFF_MAX_SECONDS", "300", "Cap of the supervisor's retry backoff.", kind=seconds(0)),
    Setting(
        "SUPERVISOR_GRACE_SECONDS",
        "0",
        "How long after its completeBy the supervisor leaves a record its attempt or compensation round still holds: "
        "the margin for hosts' clocks that disagree and for a reply that came just before the deadline, still being "
        'written (docs/supervisor.md, "Clocks"). The Bicep sets `15` (many instances); local runs, one host, `0`.',
        where="azure",
        kind=seconds(0),
        deployed="15",
    ),
    Setting(
        "SUPERVISOR_BACKEND_WAIT_SECONDS",
        "600",
        "How long past its completeBy (and SUPERVISOR_GRACE_SECONDS) the supervisor leaves an attempt whose Durable "
        "instance is still Pending or Running: the backend has not delivered its start, its timer or its step yet, "
        'which is not the order\'s failure (docs/supervisor.md, "A late Durable backend"). `0`: taken at the deadline.',
        kind=seconds(0),
    ),
    Setting(
        "SUPERVISOR_MAX_RECORDS",
        "100",
        "Expired records one supervisor run recovers at most.",
        kind=count(1, MAX_PAGE_SIZE),  # the page size of its owed and compensation queries
    ),
    Setting("SUPERVISOR_PAGE_SIZE", "25", "Page size of the supervisor's scan.", kind=count(1, MAX_PAGE_SIZE)),
    Setting(
        "SUPERVISOR_WINDOW_MINUTES",
        "60",
        "The regular scan looks at completeBy no older than this (and SUPERVISOR_GRACE_SECONDS: a held record is "
        "due only that long after it); a catch-up pass takes the rest.",
        kind=minutes(1),
    ),
    Setting("SUPERVISOR_CATCHUP_EVERY", "10", "Every Nth supervisor run also scans beyond the window.", kind=count(1)),
    # Dependency health (circuit breakers shared across orders, domain/circuit.py)
    Setting(
        "CIRCUIT_FAILURE_THRESHOLD",
        "8",
        "Consecutive transient failures of one remote service (any orders) that open its circuit; a timeout weighs "
        "half a failure, and an answer 'still working' on the same key clears the weight (docs/supervisor.md).",
        kind=count(1),
    ),
    Setting(
        "CIRCUIT_COOLDOWN_SECONDS",
        "30",
        "An open circuit lets a probe through after this long; doubles after each failed probe.",
        kind=seconds(1),
    ),
    Setting("CIRCUIT_COOLDOWN_MAX_SECONDS", "240", "Cap of the doubling cool-down between probes.", kind=seconds(1)),
    Setting(
        "CIRCUIT_PROBES", "1", "Calls a half-open circuit lets through at once to probe the service.", kind=count(1)
    ),
    Setting(
        "CIRCUIT_HEALTH_CACHE_SECONDS",
        "5",
        "How long an agent admits calls on the dependency health it last read or wrote (0: read it on every call); "
        "at most half of CIRCUIT_COOLDOWN_SECONDS.",
        kind=seconds(0),
    ),
    Setting(
        "MAX_OUTAGE_WAIT_MINUTES",
        "60",
        "How long an order waits out an open dependency (its retry budget untouched) before it escalates anyway.",
        kind=minutes(0),
    ),
    Setting(
        "OUTAGE_SETTLE_SECONDS",
        "300",
        "How long a dependency's circuit must stay closed before its outage's DependencyRecovered alert goes out; a "
        "reopening sooner continues the outage paged (no new DependencyOutage). 0: each closing is a recovery.",
        kind=_duration("seconds", 0, 3600, "an hour: a reopening later than that is a new outage"),
    ),
    Setting(
        "PAYMENT_WAIT_MINUTES",
        "60",
        "How long a prepaid order waits for its payment notification, across attempts and without spending its "
        "retry budget, before it is given up; 0 = each payment step deadline missed counts as a failure.",
        kind=minutes(0),
    ),
    # Deferral (out-of-order messages on the orders queue)
    Setting(
        "DEFER_RETRY_DELAY_SECONDS",
        "30",
        "A message deferred because a dependency was unavailable is tried again this long after (RetryDeferred).",
        kind=seconds(1),
    ),
    Setting(
        "DEFER_MAX_ROUNDS",
        "3",
        "RetryDeferred rounds of a message whose dependency stays unavailable before it is dead-lettered "
        "(a waiting message is peeked, not fetched: its rounds spend none of its deliveries).",
        kind=count(1),
    ),
    Setting(
        "PEEK_SWEEP_SCHEDULE",
        "0 */5 * * * *",
        "NCRONTAB schedule of the peek sweep over deferred messages.",
        kind=NCRONTAB,
    ),
    Setting(
        "PEEK_SWEEP_AGE_MINUTES",
        "10",
        "The peek sweep looks only at deferred messages enqueued at least this long ago.",
        kind=minutes_under_message_ttl(0),
    ),
    Setting("PEEK_SWEEP_MAX_MESSAGES", "500", "Messages one peek sweep run peeks at most.", kind=count(1)),
    Setting(
        "ORDERLESS_PAYMENT_ALERT_MINUTES",
        "120",
        "A payment notification deferred this long for an order that has not come is alerted to an operator "
        "once (PaymentWithoutOrder) by the peek sweep; it stays deferred and is applied if the order comes.",
        kind=minutes_under_message_ttl(1),
    ),
    # Durable history (retention/)
    Setting(
        "DURABLE_HISTORY_RETENTION_DAYS",
        "30",
        "Days the Durable backend keeps the history of a finished (Completed, Failed, Terminated) orchestration "
        'instance, counted from its creation: an hourly timer purges older ones (docs/design.md, "Durable '
        "history retention\"); the order's page says so of a purged attempt. 0 = never purged.",
        kind=days(0),
    ),
    # Operator API and console (operations/)
    Setting(
        "WEBSITE_AUTH_ENABLED",
        "",
        "Set by App Service itself (never by you) to `True` when its authentication (Easy Auth) is on; "
        "without it the ops API refuses every request.",
        where="platform",
        kind=PLATFORM_FLAG,
    ),
    Setting(
        "WEBSITE_SITE_NAME",
        "",
        "Set by App Service itself: the app's name. When set, `OPS_LOCAL_PRINCIPAL` is ignored.",
        where="platform",
        kind=TEXT,
    ),
    Setting(
        "OPS_LOCAL_PRINCIPAL",
        "",
        "Local development only: the operator the ops API acts as, `name:Orders.Read,Orders.Operate`, for "
        "requests addressed to localhost, 127.0.0.1 or [::1] (`Host`; any other is 403); empty = every request "
        "refused. Ignored on App Service and when platform authentication is on.",
        where="local",
        kind=TEXT,
    ),
)


class SettingsError(ValueError):
    """A setting has a value the app cannot use (the message names it and says what is expected)."""


_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def _inconsistent(parsed: Mapping[str, Any], texts: Mapping[str, str]) -> list[str]:
    """Values each valid alone that the app cannot use together."""
    problems: list[str] = []
    cache, cooldown = parsed["CIRCUIT_HEALTH_CACHE_SECONDS"], parsed["CIRCUIT_COOLDOWN_SECONDS"]
    if cache * 2 > cooldown:
        # A closed view read just before another instance opened the circuit is trusted for up to
        # `cache` after the opening; probes begin `cooldown` after it, judged by the prober's clock
        # against the opener's. A view kept past that would admit calls while the circuit is half-open,
        # past CIRCUIT_PROBES (order_agents/circuit_gate.py); the other half of the cool-down is the
        # margin for clock skew between agent instances.
        problems.append(
            f"CIRCUIT_HEALTH_CACHE_SECONDS={texts['CIRCUIT_HEALTH_CACHE_SECONDS']!r} is not valid: expected at most "
            f"half of CIRCUIT_COOLDOWN_SECONDS ({texts['CIRCUIT_COOLDOWN_SECONDS']!r}), the other half being the "
            "margin for clock skew between agent instances"
        )
    longest = agent_request_longest(
        parsed["STEP_TIMEOUT_SECONDS"], parsed["AGENT_MAX_ATTEMPTS"], parsed["AGENT_RETRY_MAX_MS"]
    )
    if longest > LOCK_RENEWAL:
        # The queues' lock and its renewal are sized for one delivery handled well inside them
        # (infra/modules/servicebus.bicep): past the renewal a second handler gets the request while the first
        # still calls the service, and each such delivery counts towards QUEUE_MAX_DELIVERY_COUNT.
        problems.append(
            f"STEP_TIMEOUT_SECONDS={texts['STEP_TIMEOUT_SECONDS']!r}, AGENT_MAX_ATTEMPTS="
            f"{texts['AGENT_MAX_ATTEMPTS']!r} and AGENT_RETRY_MAX_MS={texts['AGENT_RETRY_MAX_MS']!r} are not valid "
            f"together: an agent could spend {longest.total_seconds():.0f} s on one request (until its deadline and "
            f"a last call, or every call of {REMOTE_CALL_TIMEOUT.total_seconds():.0f} s and every backoff, then its "
            f"reply's send of up to {SEND_TIMEOUT.total_seconds():.0f} s), expected "
            f"at most the {LOCK_RENEWAL.total_seconds() / 60:.0f} minutes the Functions host renews its message's "
            "lock (host.json maxAutoLockRenewalDuration): lower one of them"
        )
    threads, sync = parsed["PYTHON_THREADPOOL_THREAD_COUNT"], sync_concurrency()
    if 0 < threads < sync:
        # The host hands over up to ``sync`` sync invocations at once; the ones past the pool wait for a thread
        # with their message's lock renewal and the functionTimeout running (docs/settings.md).
        problems.append(
            f"PYTHON_THREADPOOL_THREAD_COUNT={texts['PYTHON_THREADPOOL_THREAD_COUNT']!r} is not valid: expected at "
            f"least {sync}, the sync invocations one instance may run at once ({len(_request_queue_names())} request "
            f"queues x host.json maxConcurrentCalls {SERVICE_BUS_MAX_CONCURRENT_CALLS} + "
            f"maxConcurrentActivityFunctions {MAX_CONCURRENT_ACTIVITIES} + HTTP perInstanceConcurrency "
            f"{HTTP_PER_INSTANCE_CONCURRENCY}); an invocation past the pool waits for a thread while its message's "
            "lock renewal and functionTimeout run"
        )
    rounds, delay = parsed["DEFER_MAX_ROUNDS"], parsed["DEFER_RETRY_DELAY_SECONDS"]
    if rounds * delay >= MESSAGE_TTL:
        # Each RetryDeferred round is due DEFER_RETRY_DELAY_SECONDS after the last; the deferred message keeps
        # the time to live it was sent with, so a round due past it finds the message dead-lettered.
        problems.append(
            f"DEFER_MAX_ROUNDS={texts['DEFER_MAX_ROUNDS']!r} and DEFER_RETRY_DELAY_SECONDS="
            f"{texts['DEFER_RETRY_DELAY_SECONDS']!r} are not valid together: expected their product (the last "
            f"round's wait) under the queues' message time to live, {QUEUE_MESSAGE_TTL_DAYS} days, after which "
            "the deferred message is dead-lettered"
        )
    return problems


def _from(name: str) -> dict[str, str]:
    """The metadata of a ``Settings`` field holding the parsed value of the declared setting ``name``."""
    return {"setting": name}


@dataclass(frozen=True)
class Settings:
    """The app settings, parsed and checked once: build it with ``Settings.from_env()``, which raises
    ``SettingsError`` naming every setting whose value the app cannot use. Each field holds the typed value
    of one declaration in ``SETTINGS`` (a test checks the two match)."""

    # Connections
    service_bus_namespace: str = field(metadata=_from("ServiceBusConnection__fullyQualifiedNamespace"))
    service_bus_credential: str = field(metadata=_from("ServiceBusConnection__credential"))
    service_bus_client_id: str = field(metadata=_from("ServiceBusConnection__clientId"))
    service_bus_connection_string: str = field(metadata=_from("ServiceBusConnection"))
    cosmos_endpoint: str = field(metadata=_from("COSMOS_ENDPOINT"))
    cosmos_key: str = field(metadata=_from("COSMOS_KEY"))
    cosmos_database: str = field(metadata=_from("COSMOS_DATABASE"))
    cosmos_verify_tls: bool = field(metadata=_from("COSMOS_VERIFY_TLS"))
    azure_client_id: str = field(metadata=_from("AZURE_CLIENT_ID"))
    azure_token_credentials: str = field(metadata=_from("AZURE_TOKEN_CREDENTIALS"))
    applicationinsights_connection_string: str = field(metadata=_from("APPLICATIONINSIGHTS_CONNECTION_STRING"))
    applicationinsights_authentication_string: str = field(metadata=_from("APPLICATIONINSIGHTS_AUTHENTICATION_STRING"))
    worker_telemetry_enabled: bool = field(metadata=_from("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"))
    worker_opentelemetry_enabled: bool = field(metadata=_from("PYTHON_ENABLE_OPENTELEMETRY"))
    worker_threads: int = field(metadata=_from("PYTHON_THREADPOOL_THREAD_COUNT"))  # 0: the worker's default
    # Intake and starter
    max_pending: int = field(metadata=_from("MAX_PENDING"))
    max_in_flight: int = field(metadata=_from("MAX_IN_FLIGHT"))
    state_count_cache: timedelta = field(metadata=_from("STATE_COUNT_CACHE_SECONDS"))
    start_grace: timedelta = field(metadata=_from("START_GRACE_SECONDS"))
    starter_batch_size: int = field(metadata=_from("STARTER_BATCH_SIZE"))
    starter_schedule: str = field(metadata=_from("STARTER_SCHEDULE"))
    # Scheduler and agents
    step_timeout: timedelta = field(metadata=_from("STEP_TIMEOUT_SECONDS"))
    agent_max_attempts: int = field(metadata=_from("AGENT_MAX_ATTEMPTS"))
    agent_retry_base: timedelta = field(metadata=_from("AGENT_RETRY_BASE_MS"))
    agent_retry_max: timedelta = field(metadata=_from("AGENT_RETRY_MAX_MS"))
    inventory_service_url: str = field(metadata=_from("INVENTORY_SERVICE_URL"))
    payment_service_url: str = field(metadata=_from("PAYMENT_SERVICE_URL"))
    shipping_service_url: str = field(metadata=_from("SHIPPING_SERVICE_URL"))
    payment_backup_service_url: str = field(metadata=_from("PAYMENT_BACKUP_SERVICE_URL"))
    # Compensation and human review
    review_amount_threshold_cents: int = field(metadata=_from("REVIEW_AMOUNT_THRESHOLD_CENTS"))
    review_timeout: timedelta = field(metadata=_from("REVIEW_TIMEOUT_SECONDS"))
    review_default_action: str = field(metadata=_from("REVIEW_DEFAULT_ACTION"))
    # Supervisor
    supervisor_schedule: str = field(metadata=_from("SUPERVISOR_SCHEDULE"))
    max_failures: int = field(metadata=_from("MAX_FAILURES"))
    retry_backoff_base: timedelta = field(metadata=_from("RETRY_BACKOFF_BASE_SECONDS"))
    retry_backoff_max: timedelta = field(metadata=_from("RETRY_BACKOFF_MAX_SECONDS"))
    supervisor_grace: timedelta = field(metadata=_from("SUPERVISOR_GRACE_SECONDS"))
    supervisor_backend_wait: timedelta = field(metadata=_from("SUPERVISOR_BACKEND_WAIT_SECONDS"))
    supervisor_max_records: int = field(metadata=_from("SUPERVISOR_MAX_RECORDS"))
    supervisor_page_size: int = field(metadata=_from("SUPERVISOR_PAGE_SIZE"))
    supervisor_window: timedelta = field(metadata=_from("SUPERVISOR_WINDOW_MINUTES"))
    supervisor_catchup_every: int = field(metadata=_from("SUPERVISOR_CATCHUP_EVERY"))
    # Dependency health
    circuit_failure_threshold: int = field(metadata=_from("CIRCUIT_FAILURE_THRESHOLD"))
    circuit_cooldown: timedelta = field(metadata=_from("CIRCUIT_COOLDOWN_SECONDS"))
    circuit_cooldown_max: timedelta = field(metadata=_from("CIRCUIT_COOLDOWN_MAX_SECONDS"))
    circuit_probes: int = field(metadata=_from("CIRCUIT_PROBES"))
    circuit_health_cache: timedelta = field(metadata=_from("CIRCUIT_HEALTH_CACHE_SECONDS"))
    max_outage_wait: timedelta = field(metadata=_from("MAX_OUTAGE_WAIT_MINUTES"))
    outage_settle: timedelta = field(metadata=_from("OUTAGE_SETTLE_SECONDS"))
    payment_wait: timedelta = field(metadata=_from("PAYMENT_WAIT_MINUTES"))
    # Deferral
    defer_retry_delay: timedelta = field(metadata=_from("DEFER_RETRY_DELAY_SECONDS"))
    defer_max_rounds: int = field(metadata=_from("DEFER_MAX_ROUNDS"))
    peek_sweep_schedule: str = field(metadata=_from("PEEK_SWEEP_SCHEDULE"))
    peek_sweep_age: timedelta = field(metadata=_from("PEEK_SWEEP_AGE_MINUTES"))
    peek_sweep_max_messages: int = field(metadata=_from("PEEK_SWEEP_MAX_MESSAGES"))
    orderless_payment_alert: timedelta = field(metadata=_from("ORDERLESS_PAYMENT_ALERT_MINUTES"))
    # Durable history
    durable_history_retention: timedelta = field(metadata=_from("DURABLE_HISTORY_RETENTION_DAYS"))
    # Operator API and console
    website_auth_enabled: bool = field(metadata=_from("WEBSITE_AUTH_ENABLED"))
    website_site_name: str = field(metadata=_from("WEBSITE_SITE_NAME"))
    ops_local_principal: str = field(metadata=_from("OPS_LOCAL_PRINCIPAL"))

    @staticmethod
    def worker_threads_from_env(env: Mapping[str, str] | None = None) -> int:
        """``PYTHON_THREADPOOL_THREAD_COUNT`` of ``env`` (default: the process environment) alone; 0 when unset."""
        setting = _BY_NAME["PYTHON_THREADPOOL_THREAD_COUNT"]
        value: int = setting.parse((os.environ if env is None else env).get(setting.name, setting.default))
        return value

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> Settings:
        """The settings of ``env`` (default: the process environment; a missing name takes its default), with
        ``overrides`` on top. Raises SettingsError for an unknown override or, naming each, every value the app
        cannot use."""
        source = os.environ if env is None else env
        unknown = sorted(set(overrides) - set(_BY_NAME))
        if unknown:
            raise SettingsError("unknown setting " + ", ".join(repr(name) for name in unknown))
        texts = {s.name: source.get(s.name, s.default) for s in SETTINGS} | overrides
        parsed: dict[str, Any] = {}
        problems: list[str] = []
        for setting in SETTINGS:
            try:
                parsed[setting.name] = setting.parse(texts[setting.name])
            except SettingsError as error:
                problems.append(str(error))
        if problems:
            raise SettingsError("; ".join(problems))
        problems = _inconsistent(parsed, texts)
        if problems:
            raise SettingsError("; ".join(problems))
        return cls(**{f.name: parsed[f.metadata["setting"]] for f in fields(cls)})

    def service_url(self, service: str) -> str:
        """The URL of the real ``service`` (inventory, payment, shipping, payment_backup); empty: simulated."""
        urls = {
            "inventory": self.inventory_service_url,
            "payment": self.payment_service_url,
            "shipping": self.shipping_service_url,
            "payment_backup": self.payment_backup_service_url,
        }
        if service not in urls:
            raise SettingsError(f"unknown setting {service.upper()}_SERVICE_URL")
        return urls[service]

    @property
    def circuit_policy(self) -> CircuitPolicy:
        from domain.circuit import CircuitPolicy

        return CircuitPolicy(
            threshold=self.circuit_failure_threshold,
            cooldown=self.circuit_cooldown,
            cooldown_max=max(self.circuit_cooldown, self.circuit_cooldown_max),
            probes=self.circuit_probes,
        )


# The settings a deployment tunes first: the README's short table (the full one is docs/settings.md).
KEY_SETTINGS = (
    "STEP_TIMEOUT_SECONDS",
    "MAX_FAILURES",
    "RETRY_BACKOFF_BASE_SECONDS",
    "MAX_OUTAGE_WAIT_MINUTES",
    "PAYMENT_WAIT_MINUTES",
    "MAX_IN_FLIGHT",
    "MAX_PENDING",
    "REVIEW_AMOUNT_THRESHOLD_CENTS",
    "SUPERVISOR_SCHEDULE",
)


def settings_table(names: Sequence[str] | None = None) -> str:
    """The settings table of ``docs/settings.md`` (or of the named settings, in that order: the
    README's ``KEY_SETTINGS``), in Markdown."""
    lines = ["| name | meaning | default |", "|---|---|---|"]
    by_name = {s.name: s for s in SETTINGS}
    for s in SETTINGS if names is None else [by_name[n] for n in names]:
        default = f"`{s.default}`" if s.default else "(empty)"
        lines.append(f"| `{s.name}` | {s.meaning} | {default} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(settings_table())
