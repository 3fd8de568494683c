"""Rules the published type definitions cannot express, each with its source.

The Bicep types say which properties exist and their value types; they do not say that a Flex
Consumption app rejects a property every other App Service plan accepts, or that a log alert on a
table that does not exist yet fails at creation. Those rules are listed here explicitly, checked
over the parsed Bicep, and tested one by one (tests/infra/test_bicepcheck.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tree_sitter import Tree

from tools.bicepcheck.query import (
    Alternatives,
    Expression,
    Resource,
    alternatives,
    call_arguments,
    load,
    param_decorators,
    resources,
)

FLEX_DEPRECATIONS = (
    "https://learn.microsoft.com/azure/azure-functions/functions-app-settings#flex-consumption-plan-deprecations"
)
FLEX_PLAN = "https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan"
FLEX_HOWTO = "https://learn.microsoft.com/azure/azure-functions/flex-consumption-how-to"
LOG_ALERTS = "https://learn.microsoft.com/azure/azure-monitor/alerts/alerts-create-log-alert-rule"
PYTHON_VERSIONS = "https://learn.microsoft.com/azure/azure-functions/supported-languages"

# App settings a Flex Consumption app rejects or ignores (the deprecations table of FLEX_DEPRECATIONS): the
# runtime and the package location are configured in functionAppConfig, the build is the deployment's
# remote build (not Oryx on the SCM site), scale-out is functionAppConfig.scaleAndConcurrency, there is no
# Azure Files content share, networking is the site's VNet integration, and timers run in UTC. Upper
# case: app setting names are case-insensitive.
FLEX_FORBIDDEN_SETTINGS = frozenset(
    {
        "FUNCTIONS_WORKER_RUNTIME",
        "FUNCTIONS_WORKER_RUNTIME_VERSION",
        "FUNCTIONS_EXTENSION_VERSION",
        "FUNCTIONS_WORKER_PROCESS_COUNT",
        "SCM_DO_BUILD_DURING_DEPLOYMENT",
        "ENABLE_ORYX_BUILD",
        "WEBSITE_RUN_FROM_PACKAGE",
        "WEBSITE_CONTENTSHARE",
        "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
        "WEBSITE_SKIP_CONTENTSHARE_VALIDATION",
        "WEBSITE_MAX_DYNAMIC_APPLICATION_SCALE_OUT",
        "WEBSITE_VNET_ROUTE_ALL",
        "FUNCTIONS_MAX_HTTP_CONCURRENCY",
        "FUNCTIONS_WORKER_DYNAMIC_CONCURRENCY_ENABLED",
        "WEBSITE_CONTENTOVERVNET",
        "WEBSITE_DNS_SERVER",
        "WEBSITE_NODE_DEFAULT_VERSION",
        # not in the table but in the plan's "Considerations" (FLEX_PLAN): time zones are not supported
        "WEBSITE_TIME_ZONE",
        "TZ",
    }
)
# Site properties the same table lists as not valid, renamed or moved into functionAppConfig (ftpsState has its own
# rule, flex-no-ftps), whether set on the site's properties or its siteConfig. Lower case: compared case-insensitively.
FLEX_FORBIDDEN_SITE_PROPERTIES = frozenset(
    {
        "alwayson",
        "containersize",
        "isreserved",
        "isxenon",
        "javaversion",
        "linuxfxversion",
        "netframeworkversion",
        "powershellversion",
        "functionappscalelimit",
        "prewarmedinstancecount",
        "use32bitworkerprocess",
        "vnetbackuprestoreenabled",
        "vnetcontentshareenabled",
        "vnetimagepullenabled",
        "vnetrouteallenabled",
        "windowsfxversion",
    }
)
FLEX_INSTANCE_MEMORY_MB = frozenset({512, 2048, 4096})
FLEX_MAX_INSTANCES = (40, 1000)
FLEX_PYTHON_VERSIONS = frozenset({"3.10", "3.11", "3.12", "3.13"})

# Diagnostic setting categories per resource type (Azure Monitor, "Supported logs" and "Supported
# metrics" per resource type). Lower-case type -> (log categories, metric categories).
DIAGNOSTIC_CATEGORIES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "microsoft.servicebus/namespaces": (
        frozenset({"OperationalLogs", "VNetAndIPFilteringLogs", "RuntimeAuditLogs", "ApplicationMetricsLogs"}),
        frozenset({"AllMetrics"}),
    ),
    "microsoft.documentdb/databaseaccounts": (
        frozenset(
            {
                "DataPlaneRequests",
                "QueryRuntimeStatistics",
                "PartitionKeyStatistics",
                "PartitionKeyRUConsumption",
                "ControlPlaneRequests",
            }
        ),
        frozenset({"Requests", "SLI"}),
    ),
    "microsoft.storage/storageaccounts": (frozenset(), frozenset({"Transaction", "Capacity"})),
    "microsoft.storage/storageaccounts/blobservices": (
        frozenset({"StorageRead", "StorageWrite", "StorageDelete"}),
        frozenset({"Transaction", "Capacity"}),
    ),
    "microsoft.storage/storageaccounts/queueservices": (
        frozenset({"StorageRead", "StorageWrite", "StorageDelete"}),
        frozenset({"Transaction", "Capacity"}),
    ),
    "microsoft.storage/storageaccounts/tableservices": (
        frozenset({"StorageRead", "StorageWrite", "StorageDelete"}),
        frozenset({"Transaction", "Capacity"}),
    ),
    "microsoft.web/sites": (frozenset({"FunctionAppLogs", "AppServiceAuthenticationLogs"}), frozenset({"AllMetrics"})),
    "microsoft.durabletask/schedulers": (frozenset(), frozenset({"AllMetrics"})),
}
DIAGNOSTICS = "https://learn.microsoft.com/azure/azure-monitor/reference/logs-index"

# Resource types indexed by @azure/mcp 2.0.5 whose types.json the binary does not ship (its own
# `bicepschema get` fails on them): their bodies cannot be checked against the schema offline,
# only by the rules below and the consistency tests. Lower-case `provider/type`.
TYPE_LIBRARY_GAPS = frozenset(
    {
        "microsoft.insights/actiongroups",
        "microsoft.insights/metricalerts",
        "microsoft.insights/scheduledqueryrules",
        "microsoft.insights/diagnosticsettings",
        "microsoft.network/privatednszones",
        "microsoft.network/privatednszones/virtualnetworklinks",
        "microsoft.durabletask/schedulers",
        "microsoft.durabletask/schedulers/taskhubs",
    }
)


@dataclass(frozen=True)
class RuleFinding:
    rule: str
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.message}"


@dataclass(frozen=True)
class Rule:
    id: str
    statement: str
    source: str
    check: Callable[[Tree, Resource], list[str]]  # messages for one resource of the file


def _is_flex_site(resource: Resource) -> bool:
    properties = resource.body.get("properties")
    return (
        resource.type_name == "Microsoft.Web/sites"
        and isinstance(properties, dict)
        and "functionAppConfig" in properties
    )


def _allowed_values(tree: Tree, value: Any) -> list[Any] | None:
    """A literal as [value]; a param reference as its @allowed list; else None (not decidable)."""
    if not isinstance(value, Expression):
        return [value]
    try:
        decorators = param_decorators(tree, value.source)
    except KeyError:
        return None
    allowed = decorators.get("allowed")
    return list(allowed[0]) if allowed else None


def _bounds(tree: Tree, value: Any) -> tuple[int | None, int | None]:
    if isinstance(value, int):
        return value, value
    if isinstance(value, Expression):
        try:
            decorators = param_decorators(tree, value.source)
        except KeyError:
            return None, None
        low, high = decorators.get("minValue", [None])[0], decorators.get("maxValue", [None])[0]
        return low, high
    return None, None


def _no_ftps(tree: Tree, resource: Resource) -> list[str]:
    if not _is_flex_site(resource):
        return []
    site_config = resource.body["properties"].get("siteConfig", {})
    return (
        ["siteConfig.ftpsState is set on a Flex Consumption app"]
        if isinstance(site_config, dict) and "ftpsState" in site_config
        else []
    )


def _no_deprecated_site_properties(tree: Tree, resource: Resource) -> list[str]:
    if not _is_flex_site(resource):
        return []
    properties = resource.body["properties"]
    site_config = properties.get("siteConfig", {})
    places = [("", properties)] + ([("siteConfig.", site_config)] if isinstance(site_config, dict) else [])
    return [
        f"{prefix}{name} is set on a Flex Consumption app"
        for prefix, body in places
        for name in sorted(body)
        if name.lower() in FLEX_FORBIDDEN_SITE_PROPERTIES
    ]


def _no_deprecated_settings(tree: Tree, resource: Resource) -> list[str]:
    if resource.type_name != "Microsoft.Web/sites/config" or resource.body.get("name") != "appsettings":
        return []
    if not any(_is_flex_site(site) for site in resources(tree, "Microsoft.Web/sites")):
        return []
    names = sorted(
        name
        for name in _setting_names(tree, resource.body.get("properties", {}))
        if name.upper() in FLEX_FORBIDDEN_SETTINGS
    )
    return [f"app setting {name} is not supported on Flex Consumption" for name in names]


def _setting_names(tree: Tree, value: Any) -> set[str]:
    """Every key the settings may have: an object, a var, ``union(...)`` of those, or a
    conditional between them (each branch counts)."""
    arguments = call_arguments(value, "union")
    if arguments is not None:
        return {name for argument in arguments for name in _setting_names(tree, argument)}
    value = alternatives(tree, value)
    if isinstance(value, Alternatives):
        return {name for branch in value.values for name in _setting_names(tree, branch)}
    return set(value) if isinstance(value, dict) else set()


_ABSENT = object()


def _flex_scale_setting(resource: Resource, name: str) -> Any:
    """functionAppConfig.scaleAndConcurrency.<name> of a Flex Consumption site, or _ABSENT."""
    if not _is_flex_site(resource):
        return _ABSENT
    scale = resource.body["properties"]["functionAppConfig"].get("scaleAndConcurrency", {})
    return scale.get(name, _ABSENT) if isinstance(scale, dict) else _ABSENT


def _memory(tree: Tree, resource: Resource) -> list[str]:
    value = _flex_scale_setting(resource, "instanceMemoryMB")
    if value is _ABSENT:
        return []
    allowed = _allowed_values(tree, value)
    if allowed is None:
        return ["instanceMemoryMB is not a literal or a param with @allowed: cannot prove it is a Flex size"]
    bad = [v for v in allowed if v not in FLEX_INSTANCE_MEMORY_MB]
    return [f"instanceMemoryMB may be {bad}; Flex Consumption accepts {sorted(FLEX_INSTANCE_MEMORY_MB)}"] if bad else []


def _max_instances(tree: Tree, resource: Resource) -> list[str]:
    value = _flex_scale_setting(resource, "maximumInstanceCount")
    if value is _ABSENT:
        return []
    low, high = _bounds(tree, value)
    lowest, highest = FLEX_MAX_INSTANCES
    if low is None or high is None or low < lowest or high > highest:
        return [f"maximumInstanceCount must be bounded to {lowest}..{highest} (literal or @minValue/@maxValue)"]
    return []


def _python_version(tree: Tree, resource: Resource) -> list[str]:
    if not _is_flex_site(resource):
        return []
    runtime = resource.body["properties"]["functionAppConfig"].get("runtime", {})
    if not isinstance(runtime, dict) or runtime.get("name") != "python":
        return []
    version = runtime.get("version")
    if version not in FLEX_PYTHON_VERSIONS:
        return [f"python version {version!r} is not one Flex Consumption runs ({sorted(FLEX_PYTHON_VERSIONS)})"]
    return []


def _log_alert_skips_validation(tree: Tree, resource: Resource) -> list[str]:
    if resource.type_name.lower() != "microsoft.insights/scheduledqueryrules" or resource.existing:
        return []
    properties = resource.body.get("properties", {})
    if isinstance(properties, dict) and properties.get("skipQueryValidation") is True:
        return []
    return ["a log alert on a new workspace must set skipQueryValidation: true (its table does not exist yet)"]


def _diagnostic_categories(tree: Tree, resource: Resource) -> list[str]:
    if resource.type_name.lower() != "microsoft.insights/diagnosticsettings":
        return []
    scope = resource.body.get("scope")
    targets = [r for r in resources(tree) if isinstance(scope, Expression) and r.symbol == scope.source]
    if not targets:
        return [f"diagnostic setting scope {scope!r} is not a resource declared in this file"]
    known = DIAGNOSTIC_CATEGORIES.get(targets[0].type_name.lower())
    if known is None:
        return [f"no known diagnostic categories for {targets[0].type_name}: add them to DIAGNOSTIC_CATEGORIES"]
    properties = resource.body.get("properties", {})
    messages = []
    for key, allowed in (("logs", known[0]), ("metrics", known[1])):
        for entry in properties.get(key, []) if isinstance(properties, dict) else []:
            if not isinstance(entry, dict) or "category" not in entry:
                messages.append(f"{key}: choose categories by name (no categoryGroup such as allLogs)")
            elif entry["category"] not in allowed:
                messages.append(f"{key}: {entry['category']!r} is not a category of {targets[0].type_name}")
    return messages


RULES: tuple[Rule, ...] = (
    Rule("flex-no-ftps", "Flex Consumption apps have no FTP(S): do not set siteConfig.ftpsState", FLEX_PLAN, _no_ftps),
    Rule(
        "flex-no-deprecated-settings",
        "Flex Consumption: none of the deprecated app settings (runtime, Oryx build, run-from-package, content "
        "share, scale-out, VNet route-all: FLEX_FORBIDDEN_SETTINGS)",
        FLEX_DEPRECATIONS,
        _no_deprecated_settings,
    ),
    Rule(
        "flex-no-deprecated-site-properties",
        "Flex Consumption: none of the site properties the deprecations table lists (alwaysOn, linuxFxVersion, "
        "use32BitWorkerProcess, vnetRouteAllEnabled...: FLEX_FORBIDDEN_SITE_PROPERTIES), on the site or its siteConfig",
        FLEX_DEPRECATIONS,
        _no_deprecated_site_properties,
    ),
    Rule("flex-memory", "Flex Consumption: instanceMemoryMB is 512, 2048 or 4096", FLEX_PLAN, _memory),
    Rule("flex-max-instances", "Flex Consumption: maximumInstanceCount is 40..1000", FLEX_HOWTO, _max_instances),
    Rule("flex-python", "Flex Consumption runs Python 3.10 to 3.13", PYTHON_VERSIONS, _python_version),
    Rule(
        "log-alert-skip-query-validation",
        "A log search alert created with its workspace must set skipQueryValidation (the queried table appears later)",
        LOG_ALERTS,
        _log_alert_skips_validation,
    ),
    Rule(
        "diagnostic-categories",
        "Diagnostic settings name categories the resource type publishes (no blind allLogs)",
        DIAGNOSTICS,
        _diagnostic_categories,
    ),
)


def check_rules(root: Path) -> list[RuleFinding]:
    findings: list[RuleFinding] = []
    for path in sorted(root.rglob("*.bicep")):
        tree = load(path)
        for resource in resources(tree):
            for rule in RULES:
                findings += [RuleFinding(rule.id, str(path), resource.line, m) for m in rule.check(tree, resource)]
    return findings
