"""The code, the Bicep, the emulator config and local.settings.json.example agree: every queue,
container and app setting the code uses is declared, nothing the code does not use is, and the
policies (queue settings, indexing, identity-only access) are the ones the code relies on."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from adapters.cosmos.client import STATE_COMPOSITE_INDEXES
from adapters.cosmos.ops_queries import LIST_ORDER_ANY, LIST_ORDER_OF_STATE
from adapters.cosmos.state_store import EXPIRED_ORDER
from contracts.names import (
    ALL_QUEUES,
    EXAMPLE_STATUS_QUEUE,
    OPERATOR_ALERTS_QUEUE,
    ORDERS_CONTAINER,
    PARTITION_KEY_PATH,
    QUEUE_DUPLICATE_DETECTION_MINUTES,
    QUEUE_LOCK_DURATION_SECONDS,
    QUEUE_MAX_DELIVERY_COUNT,
    QUEUE_MESSAGE_TTL_DAYS,
    SERVICE_BUS_CONNECTION,
    STATE_CONTAINER,
    STATE_DEFAULT_TTL,
)
from domain.states import ProcessState
from settings import HTTP_PER_INSTANCE_CONCURRENCY, SETTINGS
from tests.infra.function_index import function_index
from tests.infra.paths import INFRA, MODULES, ROOT
from tools.bicepcheck.query import (
    Expression,
    call_arguments,
    evaluate,
    load,
    module_params,
    param_decorators,
    param_default,
    resolve,
    resources,
    variable,
)
from tools.bicepcheck.rules import FLEX_FORBIDDEN_SETTINGS

SERVICE_BUS = load(MODULES / "servicebus.bicep")
COSMOS = load(MODULES / "cosmos.bicep")
FUNCTION_APP = load(MODULES / "functionapp.bicep")
STORAGE = load(MODULES / "storage.bicep")
ALERTS = load(MODULES / "alerts.bicep")
MAIN = load(INFRA / "main.bicep")
EMULATOR = json.loads((ROOT / "emulators" / "servicebus-config.json").read_text())
LOCAL = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]

# Settings the Functions host reads (not the app code), allowed besides settings.py's.
HOST_SETTINGS_AZURE = {
    "AzureWebJobsStorage__credential",
    "AzureWebJobsStorage__clientId",
    "AzureWebJobsStorage__blobServiceUri",
    "AzureWebJobsStorage__queueServiceUri",
    "AzureWebJobsStorage__tableServiceUri",
}
HOST_SETTINGS_LOCAL = {"FUNCTIONS_WORKER_RUNTIME", "AzureWebJobsStorage"}

EMULATOR_SERVICE_BUS = (
    "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
    "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
)
EMULATOR_COSMOS_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


def iso_minutes(value: str) -> int:
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", value)
    assert match, f"not an ISO 8601 duration: {value!r}"
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 60 + minutes + seconds // 60


def iso_seconds(value: str) -> int:
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", value)
    assert match, f"not an ISO 8601 duration: {value!r}"
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def one(tree: Any, type_name: str) -> Any:
    found = resources(tree, type_name)
    assert len(found) == 1, f"expected one {type_name}, found {[r.symbol for r in found]}"
    return found[0]


def bicep_app_settings() -> dict[str, Any]:
    """The settings every deployment gets: the object literal, or the object literals of
    ``union({...}, <backend extras>)``."""
    settings = [r for r in resources(FUNCTION_APP, "Microsoft.Web/sites/config") if r.body["name"] == "appsettings"]
    assert len(settings) == 1
    properties = settings[0].body["properties"]
    arguments = call_arguments(properties, "union")
    if arguments is not None:
        properties = {k: v for argument in arguments if isinstance(argument, dict) for k, v in argument.items()}
    assert isinstance(properties, dict) and properties
    return properties


@pytest.fixture(scope="module")
def bindings() -> list[dict[str, Any]]:
    return [b for f in function_index() for b in f["bindings"]]


# Queues


def test_bicep_declares_exactly_the_queues_of_the_code():
    queues = one(SERVICE_BUS, "Microsoft.ServiceBus/namespaces/queues")
    assert queues.loop_over == "queueNames"
    assert queues.body["name"] == Expression(queues.loop_variable or "")
    assert sorted(variable(SERVICE_BUS, "queueNames")) == sorted(ALL_QUEUES)


def test_bicep_queue_policy_matches_the_code():
    properties = {
        key: resolve(SERVICE_BUS, value)
        for key, value in one(SERVICE_BUS, "Microsoft.ServiceBus/namespaces/queues").body["properties"].items()
    }
    assert iso_seconds(properties["lockDuration"]) == QUEUE_LOCK_DURATION_SECONDS
    assert properties["maxDeliveryCount"] == QUEUE_MAX_DELIVERY_COUNT
    assert properties["requiresDuplicateDetection"] is True
    assert iso_minutes(properties["duplicateDetectionHistoryTimeWindow"]) == QUEUE_DUPLICATE_DETECTION_MINUTES
    assert properties["deadLetteringOnMessageExpiration"] is True
    # the settings that wait on a deferred message stay under it (settings.MESSAGE_TTL)
    assert properties["defaultMessageTimeToLive"] == f"P{QUEUE_MESSAGE_TTL_DAYS}D"
    # one sequence of numbers in enqueue order: the console's search for the newest alert relies on it
    # (adapters/servicebus/browse.py)
    assert properties["enablePartitioning"] is False


def test_emulator_declares_exactly_the_queues_of_the_code_with_the_same_policy():
    (namespace,) = EMULATOR["UserConfig"]["Namespaces"]
    assert sorted(q["Name"] for q in namespace["Queues"]) == sorted(ALL_QUEUES)
    for queue in namespace["Queues"]:
        p = queue["Properties"]
        assert iso_seconds(p["LockDuration"]) == QUEUE_LOCK_DURATION_SECONDS, queue["Name"]
        assert p["MaxDeliveryCount"] == QUEUE_MAX_DELIVERY_COUNT, queue["Name"]
        assert p["RequiresDuplicateDetection"] is True, queue["Name"]
        assert iso_minutes(p["DuplicateDetectionHistoryTimeWindow"]) == QUEUE_DUPLICATE_DETECTION_MINUTES
        assert p["DeadLetteringOnMessageExpiration"] is True, queue["Name"]
        assert p["RequiresSession"] is False, queue["Name"]


def test_triggers_listen_only_on_declared_queues_through_the_shared_connection(bindings):
    service_bus = [b for b in bindings if b["type"] == "serviceBusTrigger"]
    assert service_bus, "no Service Bus trigger registered"
    assert {b["queueName"] for b in service_bus} <= set(ALL_QUEUES)
    assert {b["connection"] for b in service_bus} == {SERVICE_BUS_CONNECTION}
    assert all(b.get("autoCompleteMessages") is False for b in service_bus)  # manual settlement


def test_example_status_and_operator_queues_are_the_ones_the_bicep_grants_and_alerts_on():
    assert variable(SERVICE_BUS, "clientStatusQueueName") == EXAMPLE_STATUS_QUEUE
    assert variable(SERVICE_BUS, "operatorAlertsQueueName") == OPERATOR_ALERTS_QUEUE


def test_service_bus_namespace_is_identity_only_tls12_and_supports_duplicate_detection():
    namespace = one(SERVICE_BUS, "Microsoft.ServiceBus/namespaces")
    assert namespace.body["properties"]["disableLocalAuth"] is True
    assert namespace.body["properties"]["minimumTlsVersion"] == "1.2"
    for vnet_enabled in (False, True):  # Basic has no duplicate detection
        assert evaluate(SERVICE_BUS, namespace.body["sku"], {"vnetEnabled": vnet_enabled})["name"] in (
            "Standard",
            "Premium",
        )


# Containers


def containers() -> dict[str, dict[str, Any]]:
    found = resources(COSMOS, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers")
    return {r.body["name"]: r.body["properties"]["resource"] for r in found}


def test_bicep_declares_exactly_the_containers_of_the_code_partitioned_by_order_id():
    declared = containers()
    assert sorted(declared) == sorted([ORDERS_CONTAINER, STATE_CONTAINER])
    for name, resource in declared.items():
        assert resource["id"] == name
        paths = [resolve(COSMOS, p) for p in resource["partitionKey"]["paths"]]
        assert paths == [PARTITION_KEY_PATH], name


def test_state_container_indexes_the_supervisor_scan_and_skips_bulky_fields():
    policy = containers()[STATE_CONTAINER]["indexingPolicy"]
    assert [("/processState", "ascending"), ("/completeBy", "ascending")] in _composites(policy)
    excluded = {p["path"] for p in policy["excludedPaths"]}
    assert {"/history/*", "/steps/*", "/compensation/*"} <= excluded
    included = {p["path"] for p in policy["includedPaths"]}
    assert "/*" in included  # processState and completeBy stay indexed


# The code that queries Cosmos DB: every ORDER BY it writes as a string literal (docstrings left out).
QUERY_CODE = ("adapters", "supervisor", "operations", "deferral", "notifications", "submission", "activities")
_TERM = r"c\.\w+(?: (?:ASC|DESC))?"
_ORDER_BY = re.compile(rf"ORDER BY ({_TERM}(?:, {_TERM})*)")


def _composites(policy: dict[str, Any]) -> list[list[tuple[str, str]]]:
    return [[(p["path"], p.get("order", "ascending")) for p in composite] for composite in policy["compositeIndexes"]]


def order_by_clauses(roots: list[Path]) -> list[tuple[str, str]]:
    """(file, clause) of every ``ORDER BY c.a [DESC], ...`` in a string literal under ``roots``."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                    found += [(path.name, m.group(0)) for m in _ORDER_BY.finditer(node.value)]
    return found


def _index_terms(clause: str) -> list[tuple[str, str]]:
    terms = [t.split() for t in clause.removeprefix("ORDER BY ").split(", ")]
    return [("/" + t[0].removeprefix("c."), "descending" if t[-1] == "DESC" else "ascending") for t in terms]


def uncovered(clauses: list[tuple[str, str]], composites: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """The multi-property ORDER BYs no composite index serves: Cosmos DB needs one with the same paths in
    the same sequence, each with the clause's order, or each with the inverse order (learn.microsoft.com,
    azure/cosmos-db/index-policy, "Composite indexes": ORDER BY queries on multiple properties)."""
    flip = {"ascending": "descending", "descending": "ascending"}
    missing = []
    for where, clause in clauses:
        terms = _index_terms(clause)
        inverse = [(path, flip[order]) for path, order in terms]
        if len(terms) > 1 and terms not in composites and inverse not in composites:
            missing.append((where, clause))
    return missing


def test_every_multi_property_order_by_of_the_code_has_its_composite_index():
    clauses = order_by_clauses([ROOT / d for d in QUERY_CODE])
    assert {EXPIRED_ORDER, LIST_ORDER_OF_STATE, LIST_ORDER_ANY} <= {c for _, c in clauses}  # the search finds them
    # every query of the code runs on the state container (the orders container is only read by id)
    assert uncovered(clauses, _composites(containers()[STATE_CONTAINER]["indexingPolicy"])) == []
    excluded = {p["path"] for p in containers()[STATE_CONTAINER]["indexingPolicy"]["excludedPaths"]}
    for _, clause in clauses:  # a single-property sort needs its range index: never an excluded path
        assert not any(f"{path}/?" in excluded or f"{path}/*" in excluded for path, _ in _index_terms(clause))


def test_a_multi_property_order_by_without_its_index_is_reported(tmp_path):
    code = tmp_path / "new_query.py"
    code.write_text(
        'Q = "SELECT * FROM c WHERE c.processState = @s ORDER BY c.completeBy, c.id"\n'
        'R = "SELECT * FROM c ORDER BY c.updatedAt DESC, c.id DESC"\n'
        'def f():\n    """ORDER BY c.nothing, c.id (a docstring, not a query)"""\n',
        encoding="utf-8",
    )
    composites = _composites(containers()[STATE_CONTAINER]["indexingPolicy"])
    assert uncovered(order_by_clauses([code]), composites) == [("new_query.py", "ORDER BY c.completeBy, c.id")]


def test_the_local_containers_declare_the_composite_indexes_of_the_bicep():
    """``ensure_database`` gives the local server the same composite indexes (it refuses a sort without one)."""
    declared = _composites(containers()[STATE_CONTAINER]["indexingPolicy"])
    assert [[(p["path"], p["order"]) for p in composite] for composite in STATE_COMPOSITE_INDEXES] == declared


def test_state_container_has_time_to_live_on_with_no_default_and_orders_none():
    """The alert marks' ``ttl`` (domain/alert_marks.py) is ignored unless the container has a ``defaultTtl``; -1 expires
    nothing else. ``ensure_database`` gives the local ones the same (tests/notifications/test_alert_marks_expire.py)."""
    declared = containers()
    assert declared[STATE_CONTAINER].get("defaultTtl") == STATE_DEFAULT_TTL == -1
    assert "defaultTtl" not in declared[ORDERS_CONTAINER]


def test_orders_container_skips_order_lines():
    policy = containers()[ORDERS_CONTAINER]["indexingPolicy"]
    assert "/lines/*" in {p["path"] for p in policy["excludedPaths"]}


def test_cosmos_database_name_default_matches_the_setting():
    default = next(s.default for s in SETTINGS if s.name == "COSMOS_DATABASE")
    assert param_default(MAIN, "cosmosDatabaseName") == default
    assert module_params(MAIN, "cosmos")["databaseName"] == Expression("cosmosDatabaseName")


def test_cosmos_is_identity_only_tls12_and_serverless_by_default():
    account = one(COSMOS, "Microsoft.DocumentDB/databaseAccounts")
    properties = account.body["properties"]
    assert properties["disableLocalAuth"] is True
    assert properties["minimalTlsVersion"] == "Tls12"
    assert param_default(MAIN, "cosmosServerless") is True
    assert variable(COSMOS, "serverlessCapabilities") == [{"name": "EnableServerless"}]


# App settings


def test_bicep_sets_every_azure_setting_and_nothing_else():
    needed = {s.name for s in SETTINGS if s.where in ("both", "azure")}
    declared = set(bicep_app_settings())
    assert sorted(needed - declared) == [], "settings the app reads that the Bicep does not set"
    assert sorted(declared - needed - HOST_SETTINGS_AZURE) == [], "Bicep settings nobody reads"
    assert {name.upper() for name in declared}.isdisjoint(FLEX_FORBIDDEN_SETTINGS)


def test_bicep_tuning_values_are_the_settings_defaults():
    declared = bicep_app_settings()
    drift = {
        s.name: (declared[s.name], s.written)
        for s in SETTINGS
        if s.where == "both" and isinstance(declared.get(s.name), str) and declared[s.name] != s.written
    }
    assert drift == {}


def test_bicep_connections_are_identity_based():
    declared = bicep_app_settings()
    for connection in (SERVICE_BUS_CONNECTION, "AzureWebJobsStorage"):
        assert declared[f"{connection}__credential"] == "managedidentity"
        assert declared[f"{connection}__clientId"] == Expression("identityClientId")
    assert declared["AZURE_CLIENT_ID"] == Expression("identityClientId")
    # DefaultAzureCredential tries the managed identity alone (tests/identity/test_token_credentials.py)
    assert declared["AZURE_TOKEN_CREDENTIALS"] == "ManagedIdentityCredential"
    assert declared["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] == Expression(
        "'Authorization=AAD;ClientId=${identityClientId}'"
    )
    assert SERVICE_BUS_CONNECTION not in declared  # no connection string in Azure
    assert "COSMOS_KEY" not in declared


def test_local_example_sets_every_local_setting_and_nothing_else():
    needed = {s.name for s in SETTINGS if s.where in ("both", "local")}
    declared = set(LOCAL)
    assert sorted(needed - declared) == []
    assert sorted(declared - needed - HOST_SETTINGS_LOCAL) == []


def test_local_example_points_at_the_emulators():
    assert LOCAL["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"
    assert LOCAL["FUNCTIONS_WORKER_RUNTIME"] == "python"
    assert LOCAL[SERVICE_BUS_CONNECTION] == EMULATOR_SERVICE_BUS
    assert LOCAL["COSMOS_ENDPOINT"] == "https://localhost:8081"
    assert LOCAL["COSMOS_KEY"] == EMULATOR_COSMOS_KEY
    assert LOCAL["COSMOS_VERIFY_TLS"] == "false"
    both = {s.name: s.written for s in SETTINGS if s.where == "both"}
    assert {name: LOCAL[name] for name in both} == both


def test_binding_expressions_name_settings_set_in_both_places(bindings):
    expressions = {
        name
        for b in bindings
        for value in b.values()
        if isinstance(value, str)
        for name in re.findall(r"%([A-Za-z0-9_]+)%", value)
    }
    assert {"STARTER_SCHEDULE", "SUPERVISOR_SCHEDULE"} <= expressions
    assert sorted(expressions - set(bicep_app_settings())) == []
    assert sorted(expressions - set(LOCAL)) == []


# Hosting


def test_function_app_is_python_313_on_flex_consumption():
    plan = one(FUNCTION_APP, "Microsoft.Web/serverfarms")
    assert plan.body["sku"] == {"name": "FC1", "tier": "FlexConsumption"}
    site = one(FUNCTION_APP, "Microsoft.Web/sites")
    config = site.body["properties"]["functionAppConfig"]
    # The app targets Python 3.13 with the pinned azure-functions-runtime (requirements.txt).
    assert config["runtime"] == {"name": "python", "version": "3.13"}
    assert re.search(r"^azure-functions-runtime==", (ROOT / "requirements.txt").read_text(), flags=re.MULTILINE)
    assert config["scaleAndConcurrency"] == {
        "maximumInstanceCount": Expression("maximumInstanceCount"),
        "instanceMemoryMB": Expression("instanceMemoryMB"),
        "triggers": {"http": {"perInstanceConcurrency": HTTP_PER_INSTANCE_CONCURRENCY}},
    }
    assert config["deployment"]["storage"]["authentication"]["type"] == "UserAssignedIdentity"
    assert site.body["identity"]["type"] == "UserAssigned"
    assert site.body["properties"]["httpsOnly"] is True


def test_every_instance_size_the_docs_offer_is_one_the_bicep_takes():
    """docs/cost.md suggests lowering instanceMemoryMB to 512 (Flex Consumption's sizes are 512, 2,048 and
    4,096 MB: flex-consumption-plan, "Instance memory" and the quota table): the parameter must accept it,
    in main.bicep and in the module it passes it to, and default to Microsoft's default, 2,048."""
    offered = {
        int(size)
        for size in re.findall(r"Flex offers (\d+), (\d+) and (\d+) MB", (ROOT / "docs" / "cost.md").read_text())[0]
    }
    assert offered == {512, 2048, 4096}
    for tree in (MAIN, FUNCTION_APP):
        assert set(param_decorators(tree, "instanceMemoryMB")["allowed"][0]) == offered
    assert param_default(MAIN, "instanceMemoryMB") == 2048


def test_function_app_carries_the_azd_service_tag():
    site = one(FUNCTION_APP, "Microsoft.Web/sites")
    assert "'azd-service-name': 'api'" in site.body["tags"].source


def test_storage_is_identity_only():
    account = one(STORAGE, "Microsoft.Storage/storageAccounts")
    properties = account.body["properties"]
    assert properties["allowSharedKeyAccess"] is False
    assert properties["allowBlobPublicAccess"] is False
    assert properties["minimumTlsVersion"] == "TLS1_2"


def test_application_insights_accepts_only_entra_id():
    assert module_params(MAIN, "appInsights")["disableLocalAuth"] is True


def test_parameters_file_takes_the_azd_environment():
    parameters = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    assert parameters["environmentName"]["value"] == "${AZURE_ENV_NAME}"
    assert parameters["location"]["value"] == "${AZURE_LOCATION}"
    assert parameters["principalId"]["value"] == "${AZURE_PRINCIPAL_ID}"
    main_params = {p for p in parameters}
    declared = set(re.findall(r"^param (\w+)", (INFRA / "main.bicep").read_text(), flags=re.MULTILINE))
    assert main_params <= declared


# Alerts


def log_rule(symbol: str) -> Any:
    rules = {r.symbol: r for r in resources(ALERTS, "Microsoft.Insights/scheduledQueryRules")}
    expected = {
        "operatorAlertRaised",
        "ordersFailed",
        "supervisorFailing",
        "deadLettersFound",
        "alertsUndelivered",
        "storeAccessRefused",
        "durableBackendFailing",
    }
    assert set(rules) == expected, sorted(rules)
    return rules[symbol]


def test_failed_orders_alert_queries_the_event_the_app_logs():
    rule = log_rule("ordersFailed")
    query = rule.body["properties"]["criteria"]["allOf"][0]["query"]
    assert ProcessState.ERROR.value in query and ProcessState.COMPENSATION_FAILED.value in query
    events = (ROOT / "observability" / "events.py").read_text()
    for logged in ('"StateTransition"', '"toState"'):
        assert logged in events, f"observability/events.py no longer logs {logged}: update the alert query"
    assert '"StateTransition"' in query.replace("'", '"') or "StateTransition" in query


def test_dead_letter_and_operator_alerts_query_the_events_the_app_logs():
    """No metric alert: Service Bus's metrics have one time series per queue, so a stateful metric alert fired at the
    first dead letter (operator alert) stayed fired while they waited (kept coming), and the next paged nobody
    (tests/observability/test_dead_letter_alert.py, test_operator_alert_rule.py)."""
    assert resources(ALERTS, "Microsoft.Insights/metricAlerts") == []
    logged = {
        "operatorAlertRaised": ('"OperatorAlert"', ROOT / "notifications" / "alerts.py"),
        "deadLettersFound": ('"DeadLetterFound"', ROOT / "supervisor" / "dead_letters.py"),
    }
    for symbol, (event, source) in logged.items():
        query = log_rule(symbol).body["properties"]["criteria"]["allOf"][0]["query"]
        assert event in query and event in source.read_text(), (symbol, event)


def test_supervisor_failing_alert_queries_the_events_the_app_logs():
    """SupervisorPhaseFailed and UnmappedDocument let the run go on: this rule is what makes them heard."""
    query = log_rule("supervisorFailing").body["properties"]["criteria"]["allOf"][0]["query"]
    logged = {
        "SupervisorPhaseFailed": ROOT / "supervisor" / "run.py",
        "UnmappedDocument": ROOT / "adapters" / "cosmos" / "state_store.py",
    }
    for event, source in logged.items():
        assert f'"{event}"' in query, f"the supervisorFailing rule does not query {event}"
        assert f'"{event}"' in source.read_text(), f"{source} no longer logs {event}: update the alert query"


def test_undelivered_alerts_rule_queries_the_events_the_app_logs():
    """An alert its courier gave up on (``AlertUndelivered``: operator-alerts refused it for about six hours)
    never reaches the queue the OperatorAlert rule watches, nor does a ``StatusUndelivered`` alert whose own
    send failed (only logged, ``AlertSendFailed``), nor a status or an alert whose last try failed on every repeat
    without running its give-up (``LastTryLost``, logged by its orchestration): this rule is what makes them heard."""
    query = log_rule("alertsUndelivered").body["properties"]["criteria"]["allOf"][0]["query"]
    logged = {
        "AlertUndelivered": ROOT / "notifications" / "alerts.py",
        "AlertSendFailed": ROOT / "notifications" / "alerts.py",
        "StatusUndelivered": ROOT / "notifications" / "status.py",
        "LastTryLost": ROOT / "orchestrators" / "status.py",
    }
    for event, source in logged.items():
        assert f'"{event}"' in query, f"the alertsUndelivered rule does not query {event}"
        assert f'"{event}"' in source.read_text(), f"{source} no longer logs {event}: update the alert query"
    assert "alertKind" in query  # only the failed sends of StatusUndelivered alerts, not every AlertSendFailed
    assert 'alertKind=alert.get("kind")' in (ROOT / "notifications" / "alerts.py").read_text()


def test_store_access_refused_rule_queries_the_event_every_refusal_logs():
    """Cosmos DB refusing the app's identity for 20 minutes pages through this rule: on the event the one mapping of
    the SDK's refusals logs (``adapters/cosmos/errors.py``), not on a worker's memory (a restart lost it), refused in
    each of five 5-minute periods in a row (tests/identity/test_redteam_refused2.py)."""
    properties = log_rule("storeAccessRefused").body["properties"]
    [criterion] = properties["criteria"]["allOf"]
    assert '"StoreRequestRefused"' in criterion["query"]
    assert '"StoreRequestRefused"' in (ROOT / "adapters" / "cosmos" / "errors.py").read_text()
    assert criterion["failingPeriods"] == {"numberOfEvaluationPeriods": 5, "minFailingPeriodsToAlert": 5}
    assert (properties["windowSize"], properties["evaluationFrequency"]) == ("PT5M", "PT5M")


def test_durable_backend_rule_queries_the_events_of_durable_calls_failing():
    """A Durable backend failing for 10 minutes pages through this rule, on the events the app's Durable calls log when
    they fail, each still logged where it names (tests/observability/test_durable_backend_alert.py); a StartFailed
    only when a Durable start failed (``durableCall``), not the store's."""
    properties = log_rule("durableBackendFailing").body["properties"]
    [criterion] = properties["criteria"]["allOf"]
    logged = {
        "StartFailed": ROOT / "orchestrators" / "starter.py",
        "CompensationStartFailed": ROOT / "orchestrators" / "starter.py",
        "DurablePhaseStopped": ROOT / "adapters" / "durable_client.py",
        "ReplyRetryScheduled": ROOT / "order_agents" / "reply_relay.py",
        "ReplyLeftToDeadline": ROOT / "order_agents" / "reply_relay.py",
        "SupervisorStatusUnread": ROOT / "supervisor" / "backend_wait.py",
        "SupervisorTerminateFailed": ROOT / "supervisor" / "terminate.py",
    }
    for event, source in logged.items():
        assert f'"{event}"' in criterion["query"], f"the durableBackendFailing rule does not query {event}"
        assert f'"{event}"' in source.read_text(), f"{source} no longer logs {event}: update the alert query"
    assert 'durableCall="start"' in (ROOT / "orchestrators" / "starter.py").read_text()
    assert "dimensions" not in criterion
    assert criterion["failingPeriods"] == {"numberOfEvaluationPeriods": 3, "minFailingPeriodsToAlert": 3}
    assert (properties["windowSize"], properties["evaluationFrequency"]) == ("PT5M", "PT5M")


def test_failed_orders_alert_survives_a_new_workspace():
    """The log alerts are created before the app ever logs: AppTraces does not exist yet."""
    for rule in resources(ALERTS, "Microsoft.Insights/scheduledQueryRules"):
        assert rule.body["properties"]["skipQueryValidation"] is True, rule.symbol
    alerts_module = (INFRA / "main.bicep").read_text().split("module alerts ", 1)[1].split("\n}\n", 1)[0]
    assert re.search(r"dependsOn: \[\s*appInsights\s*\]", alerts_module), "alerts must wait for Application Insights"


# Regions


def test_location_is_limited_to_flex_consumption_regions():
    allowed = param_decorators(MAIN, "location")["allowed"][0]
    assert {"swedencentral", "eastus", "westeurope"} <= set(allowed)
    # Regions without Flex Consumption (e.g. West India, the Azure Government and China clouds) fail
    # at parameter validation, before anything is created.
    assert not {"westindia", "usgovvirginia", "chinanorth3"} & set(allowed)
    assert allowed == sorted(allowed) and len(allowed) == len(set(allowed))


# Diagnostic settings

DIAGNOSTICS = load(MODULES / "diagnostics.bicep")
# Resource types that get a diagnostic setting, and the scope they are declared under.
DIAGNOSED_TYPES = {
    "Microsoft.ServiceBus/namespaces",
    "Microsoft.DocumentDB/databaseAccounts",
    "Microsoft.Storage/storageAccounts",
    "Microsoft.Storage/storageAccounts/blobServices",
    "Microsoft.Storage/storageAccounts/queueServices",
    "Microsoft.Storage/storageAccounts/tableServices",
    "Microsoft.Web/sites",
}
# Per-request categories that would multiply the ingestion bill (Durable on Azure Storage polls
# queues and tables continuously; every Cosmos DB read and write would be a row).
EXPENSIVE_CATEGORIES = {"DataPlaneRequests", "QueryRuntimeStatistics", "StorageRead", "StorageWrite"}


def test_every_resource_sends_diagnostics_to_the_workspace():
    targets = {r.symbol: r.type_name for r in resources(DIAGNOSTICS) if r.existing}
    settings = resources(DIAGNOSTICS, "Microsoft.Insights/diagnosticSettings")
    diagnosed = {targets[s.body["scope"].source] for s in settings}
    assert diagnosed == DIAGNOSED_TYPES
    for setting in settings:
        assert setting.body["properties"]["workspaceId"] == Expression("logAnalyticsWorkspaceId"), setting.symbol
    passed = module_params(MAIN, "diagnostics")
    assert passed["logAnalyticsWorkspaceId"] == Expression("logAnalytics.outputs.resourceId")
    assert passed["functionAppName"] == Expression("functionApp.outputs.name")


def test_diagnostics_choose_categories_and_leave_out_the_expensive_ones():
    for setting in resources(DIAGNOSTICS, "Microsoft.Insights/diagnosticSettings"):
        properties = setting.body["properties"]
        entries = properties.get("logs", []) + properties.get("metrics", [])
        assert entries, setting.symbol
        categories = {entry["category"] for entry in entries}
        assert not categories & EXPENSIVE_CATEGORIES, setting.symbol


def test_outputs_carry_the_official_template_names_and_what_the_hooks_read():
    outputs = set(re.findall(r"^output (\w+) ", (INFRA / "main.bicep").read_text(), flags=re.MULTILINE))
    assert {"AZURE_LOCATION", "AZURE_TENANT_ID", "SERVICE_API_NAME", "AZURE_FUNCTION_NAME"} <= outputs
    hook = (ROOT / "scripts" / "postprovision.sh").read_text()
    read_by_hook = set(re.findall(r"\bget ([A-Z_]+)\b", hook)) | set(re.findall(r"\$\{?([A-Z][A-Z_]+)\}?", hook))
    azd_outputs = {name for name in read_by_hook if name.startswith(("SERVICEBUS_", "COSMOS_", "AZURE_FUNCTION"))}
    assert azd_outputs and azd_outputs <= outputs
