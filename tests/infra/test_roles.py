"""Every data role the code needs is granted, least privilege, to the app identity and to the
deploying user; the example submitter gets Sender on `orders` and Receiver on its own status
queue, nothing else, with the principal type it is given."""

from __future__ import annotations

from typing import Any

from contracts.names import ORDERS_QUEUE
from tests.infra.paths import INFRA, MODULES
from tools.bicepcheck.query import Expression, load, module_params, param_default, resources, variable

RBAC = load(MODULES / "rbac.bicep")
MAIN = load(INFRA / "main.bicep")
SERVICE_BUS = load(MODULES / "servicebus.bicep")

# Built-in role definition ids (FIELD-NOTES, from the Azure built-in roles reference).
ROLE_IDS = {
    "storageBlobDataOwner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "storageQueueDataContributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    "storageTableDataContributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
    "serviceBusDataReceiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
    "serviceBusDataSender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
    "serviceBusDataOwner": "090c5cfd-751d-490a-894a-3ce6f1109419",
    "monitoringMetricsPublisher": "3913510d-42f4-4e42-8a64-420c390055eb",
}
COSMOS_DATA_CONTRIBUTOR = "00000000-0000-0000-0000-000000000002"

# What the code needs, per scope: host + Durable on storage, telemetry publishing on Application
# Insights, and on Service Bus send + receive (a local `func start`), or, for the app identity,
# Data Owner: the Service Bus trigger's scale decisions read queue runtime properties, which
# Microsoft's identity-connection guidance for the trigger grants with Data Owner (it includes
# send and receive). Receive (Listen) on the namespace covers every entity's subqueues too: the dead-letter watch's
# peeks of each app queue's $DeadLetterQueue (supervisor/dead_letters.py) need no other role.
STORAGE_AND_TELEMETRY = {
    ("storageAccount", "storageBlobDataOwner"),
    ("storageAccount", "storageQueueDataContributor"),
    ("storageAccount", "storageTableDataContributor"),
    ("applicationInsights", "monitoringMetricsPublisher"),
}
APP_NEEDS = STORAGE_AND_TELEMETRY | {("serviceBusNamespace", "serviceBusDataOwner")}
USER_NEEDS = STORAGE_AND_TELEMETRY | {
    ("serviceBusNamespace", "serviceBusDataReceiver"),
    ("serviceBusNamespace", "serviceBusDataSender"),
}


def role_names(resource: Any) -> set[str]:
    """Role names (keys of var roles) a roleAssignments resource grants, through a loop or not."""
    if resource.loop_over is not None:
        items = variable(RBAC, resource.loop_over)
        return {item.source.removeprefix("roles.") for item in items}
    role = resource.body["properties"]["roleDefinitionId"].source
    return {name for name in ROLE_IDS if f"roles.{name})" in role}


def grants() -> dict[str, set[tuple[str, str]]]:
    """principal param -> {(scope symbol, role name)} of every Azure RBAC assignment."""
    result: dict[str, set[tuple[str, str]]] = {}
    for resource in resources(RBAC, "Microsoft.Authorization/roleAssignments"):
        principal = resource.body["properties"]["principalId"].source
        scope = resource.body["scope"].source
        for role in role_names(resource):
            result.setdefault(principal, set()).add((scope, role))
    return result


def test_role_ids_are_the_built_in_ones():
    assert variable(RBAC, "roles") == ROLE_IDS
    assert variable(RBAC, "cosmosDataContributorRoleId") == COSMOS_DATA_CONTRIBUTOR


def test_app_identity_has_exactly_the_roles_it_needs():
    assert grants()["appPrincipalId"] == APP_NEEDS


def test_deploying_user_has_the_data_roles_of_a_local_run():
    assert grants()["userPrincipalId"] == USER_NEEDS


def test_client_may_only_send_orders_and_receive_its_statuses():
    assert grants()["clientPrincipalId"] == {
        ("ordersQueue", "serviceBusDataSender"),
        ("clientStatusQueue", "serviceBusDataReceiver"),
    }
    queues = {r.symbol: r.body["name"] for r in resources(RBAC, "Microsoft.ServiceBus/namespaces/queues")}
    assert queues == {
        "clientStatusQueue": Expression("clientStatusQueueName"),
        "ordersQueue": Expression("ordersQueueName"),
    }
    assert variable(SERVICE_BUS, "ordersQueueName") == ORDERS_QUEUE
    assert module_params(MAIN, "rbac")["ordersQueueName"] == Expression("serviceBus.outputs.ordersQueueName")


def test_principal_types_are_parameters_except_the_app_identity():
    expected = {"appPrincipalId": "'ServicePrincipal'", "userPrincipalId": "userPrincipalType"}
    expected["clientPrincipalId"] = "clientPrincipalType"
    for resource in resources(RBAC, "Microsoft.Authorization/roleAssignments"):
        properties = resource.body["properties"]
        principal_type = properties["principalType"]
        source = principal_type.source if isinstance(principal_type, Expression) else repr(principal_type)
        assert source.replace('"', "'") == expected[properties["principalId"].source], resource.symbol
    passed = module_params(MAIN, "rbac")
    assert passed["clientPrincipalType"] == Expression("clientPrincipalType")
    assert param_default(MAIN, "clientPrincipalType") == "ServicePrincipal"


def test_optional_principals_are_conditional_and_the_app_is_not():
    for resource in resources(RBAC, "Microsoft.Authorization/roleAssignments") + resources(
        RBAC, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments"
    ):
        principal = resource.body["properties"]["principalId"].source
        expected = {"appPrincipalId": None, "userPrincipalId": "(hasUser)", "clientPrincipalId": "(hasClient)"}
        assert resource.condition == expected[principal], resource.symbol


def test_assignment_names_are_deterministic_per_scope_principal_and_role():
    for resource in resources(RBAC, "Microsoft.Authorization/roleAssignments"):
        name = resource.body["name"].source
        principal = resource.body["properties"]["principalId"].source
        assert name.startswith("guid(") and principal in name and "role" in name.lower(), resource.symbol


def test_cosmos_data_contributor_for_app_and_user():
    assigned = {}
    for resource in resources(RBAC, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments"):
        properties = resource.body["properties"]
        assert "cosmosDataContributorRoleId" in properties["roleDefinitionId"].source
        assert properties["scope"] == Expression("cosmosAccount.id")
        assigned[properties["principalId"].source] = resource.symbol
    assert set(assigned) == {"appPrincipalId", "userPrincipalId"}


def test_main_passes_the_app_identity_and_the_deploying_user():
    passed = module_params(MAIN, "rbac")
    assert passed["appPrincipalId"] == Expression("appIdentity.outputs.principalId")
    assert passed["userPrincipalId"] == Expression("principalId")
    assert passed["clientPrincipalId"] == Expression("clientPrincipalId")
