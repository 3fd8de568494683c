"""The two deployment options, VNET_ENABLED and DURABLE_BACKEND: azd parameters with safe defaults,
and under each value the resources, settings and network switches the Bicep deploys (its
conditions evaluated with tools.bicepcheck.query.evaluate)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.infra.paths import INFRA, MODULES, ROOT, schema
from tools.bicepcheck.query import (
    Expression,
    alternatives,
    call_arguments,
    evaluate,
    load,
    module_params,
    param_decorators,
    param_default,
    resources,
)

MAIN = load(INFRA / "main.bicep")
FUNCTION_APP = load(MODULES / "functionapp.bicep")
NETWORK = load(MODULES / "network.bicep")
DURABLE_TASK = load(MODULES / "durabletask.bicep")
PARAMETERS = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
HOST = json.loads((ROOT / "host.json").read_text())
DURABLE_TASK_DATA_CONTRIBUTOR = "0ad04412-c4d5-4796-b79c-f76d14c8d402"
OPTIONS = [{"vnetEnabled": vnet, "durableBackend": backend} for vnet in (False, True) for backend in ("storage", "dts")]


def module_condition(symbol: str) -> str | None:
    text = (INFRA / "main.bicep").read_text()
    match = re.search(rf"^module {symbol} '[^']+' = (?:if \((.*)\) )?\{{", text, flags=re.MULTILINE)
    assert match, f"no module {symbol}"
    return match.group(1)


def deployed(symbol: str, option: dict[str, Any]) -> bool:
    condition = module_condition(symbol)
    return True if condition is None else bool(evaluate(MAIN, Expression(condition), option))


def one(tree: Any, type_name: str) -> Any:
    (found,) = resources(tree, type_name)
    return found


def test_options_are_azd_environment_values_with_safe_defaults():
    assert PARAMETERS["vnetEnabled"]["value"] == "${VNET_ENABLED=false}"
    assert PARAMETERS["durableBackend"]["value"] == "${DURABLE_BACKEND=storage}"
    assert param_default(MAIN, "vnetEnabled") is False
    assert param_default(MAIN, "durableBackend") == "storage"
    assert param_decorators(MAIN, "durableBackend")["allowed"] == [["storage", "dts"]]


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: f"vnet={o['vnetEnabled']},{o['durableBackend']}")
def test_each_option_deploys_exactly_its_modules(option):
    assert deployed("network", option) is option["vnetEnabled"]
    assert deployed("durableTask", option) is (option["durableBackend"] == "dts")
    for always in ("storage", "serviceBus", "cosmos", "functionApp", "rbac", "alerts", "diagnostics"):
        assert deployed(always, option), always
    passed = module_params(MAIN, "functionApp")
    subnet = evaluate(MAIN, passed["appSubnetId"], {**option, "network": None}) if not option["vnetEnabled"] else "x"
    assert (subnet == "") is (not option["vnetEnabled"])


@pytest.mark.parametrize("vnet_enabled", [False, True])
def test_private_networking_switches_every_data_service(vnet_enabled):
    env = {"vnetEnabled": vnet_enabled}
    expected_access = "Disabled" if vnet_enabled else "Enabled"
    for module, type_name in [
        ("storage.bicep", "Microsoft.Storage/storageAccounts"),
        ("servicebus.bicep", "Microsoft.ServiceBus/namespaces"),
        ("cosmos.bicep", "Microsoft.DocumentDB/databaseAccounts"),
    ]:
        tree = load(MODULES / module)
        properties = evaluate(tree, one(tree, type_name).body["properties"], env)
        assert properties["publicNetworkAccess"] == expected_access, module
        assert module_params(MAIN, module.split(".")[0].replace("servicebus", "serviceBus"))["vnetEnabled"] == (
            Expression("vnetEnabled")
        )
    storage = load(MODULES / "storage.bicep")
    acls = evaluate(storage, one(storage, "Microsoft.Storage/storageAccounts").body["properties"]["networkAcls"], env)
    assert acls["defaultAction"] == ("Deny" if vnet_enabled else "Allow")
    service_bus = load(MODULES / "servicebus.bicep")
    sku = evaluate(service_bus, one(service_bus, "Microsoft.ServiceBus/namespaces").body["sku"], env)
    assert sku["name"] == ("Premium" if vnet_enabled else "Standard")  # private endpoints need Premium


def test_network_has_a_private_endpoint_and_dns_zone_per_data_endpoint():
    endpoints = evaluate(NETWORK, Expression("endpoints"), {})
    targets = {(e["target"], e["groupId"]) for e in endpoints}
    assert targets == {
        (Expression("storageAccountId"), "blob"),
        (Expression("storageAccountId"), "queue"),
        (Expression("storageAccountId"), "table"),
        (Expression("serviceBusNamespaceId"), "namespace"),
        (Expression("cosmosAccountId"), "Sql"),
    }
    zones = {e["groupId"]: e["zone"] for e in endpoints}
    assert zones["namespace"] == "privatelink.servicebus.windows.net"
    assert zones["Sql"] == "privatelink.documents.azure.com"
    assert all(zones[g].source == f"'privatelink.{g}.${{storageSuffix}}'" for g in ("blob", "queue", "table"))
    for type_name in (
        "Microsoft.Network/privateEndpoints",
        "Microsoft.Network/privateDnsZones",
        "Microsoft.Network/privateDnsZones/virtualNetworkLinks",
        "Microsoft.Network/privateEndpoints/privateDnsZoneGroups",
    ):
        assert one(NETWORK, type_name).loop_over in ("endpoints", "(endpoint, i) in endpoints"), type_name


def test_app_subnet_is_delegated_for_flex_consumption_and_used_by_the_app():
    vnet = one(NETWORK, "Microsoft.Network/virtualNetworks")
    subnets = {s["name"]: s for s in evaluate(NETWORK, vnet.body["properties"]["subnets"], {})}
    app = subnets[evaluate(NETWORK, Expression("appSubnetName"), {})]
    assert [d["properties"]["serviceName"] for d in app["properties"]["delegations"]] == ["Microsoft.App/environments"]
    site = one(FUNCTION_APP, "Microsoft.Web/sites")
    assert site.body["properties"]["virtualNetworkSubnetId"] == Expression("empty(appSubnetId) ? null : appSubnetId")
    assert module_params(MAIN, "functionApp")["appSubnetId"] == Expression(
        "vnetEnabled ? network.outputs.appSubnetId : ''"
    )


# Durable Task Scheduler


def backend_settings(backend: str) -> dict[str, Any]:
    """The app settings a backend adds to the common ones (the union's non-literal arguments)."""
    config = next(r for r in resources(FUNCTION_APP, "Microsoft.Web/sites/config") if r.body["name"] == "appsettings")
    arguments = call_arguments(config.body["properties"], "union")
    assert arguments is not None and isinstance(arguments[0], dict)
    extra: dict[str, Any] = {}
    for argument in arguments[1:]:
        extra.update(evaluate(FUNCTION_APP, argument, {"durableBackend": backend}))
    return extra


def effective_host_json(settings: dict[str, Any]) -> dict[str, Any]:
    """host.json with the AzureFunctionsJobHost__a__b overrides applied, as the host does."""
    host: dict[str, Any] = json.loads(json.dumps(HOST))
    for name, value in settings.items():
        if name.startswith("AzureFunctionsJobHost__"):
            *path, leaf = name.removeprefix("AzureFunctionsJobHost__").split("__")
            node = host
            for key in path:
                node = node.setdefault(key, {})
            node[leaf] = value
    return host


def test_storage_backend_adds_nothing_to_host_json():
    assert backend_settings("storage") == {}
    assert "type" not in HOST["extensions"]["durableTask"]["storageProvider"]


def test_dts_backend_switches_the_storage_provider_with_an_identity_connection():
    settings = backend_settings("dts")
    host = effective_host_json(settings)
    provider = host["extensions"]["durableTask"]["storageProvider"]
    assert provider["type"] == "azureManaged"
    connection = settings[provider["connectionStringName"]]
    assert connection.source == (
        "'Endpoint=${durableTaskSchedulerEndpoint};Authentication=ManagedIdentity;ClientID=${identityClientId}'"
    )
    assert module_params(MAIN, "functionApp")["durableTaskSchedulerEndpoint"] == Expression(
        "durableBackend == 'dts' ? durableTask.outputs.endpoint : ''"
    )


def test_effective_dts_host_json_is_valid_but_for_the_provider_type(tmp_path):
    """The published host.json schema predates storage provider types: it knows no
    storageProvider.type at all (not mssql, netherite or azureManaged), so that one key is taken
    out before validating; everything else the overrides produce must be valid."""
    host = effective_host_json(backend_settings("dts"))
    assert host["extensions"]["durableTask"]["storageProvider"].pop("type") == "azureManaged"
    document = tmp_path / "host.json"
    document.write_text(json.dumps(host))
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema("host.json.schema.json")), str(document)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_extension_bundle_range_admits_the_version_dts_needs():
    """azureManaged needs extension bundle 4.32.0+; Azure resolves the range to the newest 4.x."""
    match = re.fullmatch(r"\[(\d+)\.(\*|\d+)(?:\.\d+)?, (\d+)\.0\.0\)", HOST["extensionBundle"]["version"])
    assert match, HOST["extensionBundle"]["version"]
    low_major, low_minor, high_major = match.groups()
    assert int(low_major) == 4 and int(high_major) == 5
    assert low_minor == "*" or int(low_minor) <= 32


def test_task_hub_is_the_one_host_json_names_and_the_identity_may_use_it():
    assert param_default(MAIN, "taskHubName") == HOST["extensions"]["durableTask"]["hubName"]
    assert module_params(MAIN, "durableTask")["taskHubName"] == Expression("taskHubName")
    assert one(DURABLE_TASK, "Microsoft.DurableTask/schedulers/taskHubs").body["name"] == Expression("taskHubName")
    grants = {
        r.body["properties"]["principalId"].source: r.body["scope"].source
        for r in resources(DURABLE_TASK, "Microsoft.Authorization/roleAssignments")
    }
    assert grants == {"appPrincipalId": "scheduler", "userPrincipalId": "scheduler"}
    assert evaluate(DURABLE_TASK, Expression("durableTaskDataContributor"), {}) == DURABLE_TASK_DATA_CONTRIBUTOR
    assert module_params(MAIN, "durableTask")["appPrincipalId"] == Expression("appIdentity.outputs.principalId")


def test_scheduler_accepts_traffic():
    """An empty ipAllowlist denies everything: the identity's role is the gate."""
    scheduler = one(DURABLE_TASK, "Microsoft.DurableTask/schedulers")
    assert scheduler.body["properties"]["ipAllowlist"] == ["0.0.0.0/0"]
    sku = alternatives(DURABLE_TASK, scheduler.body["properties"]["sku"])
    assert sku == {"name": "Consumption"}
