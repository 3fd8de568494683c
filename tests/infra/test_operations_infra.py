"""The operator side of the infrastructure: App Service authentication (Easy Auth) with Entra ID in
front of the ops API, with the app roles the code checks, and the Azure Monitor workbook whose queries
use only fields and events the app emits."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from operations.auth import OPERATE_ROLE, READ_ROLE, ROLES
from tests.infra.paths import INFRA, MODULES, ROOT
from tests.test_docs import app_trees, emitted_event_names
from tools.bicepcheck.query import load, param_default, resources, variable

FUNCTION_APP = load(MODULES / "functionapp.bicep")
WORKBOOK = load(MODULES / "workbook.bicep")
APP_ROLES = json.loads((INFRA / "ops-app-roles.json").read_text())


def test_easy_auth_is_entra_id_and_lets_the_app_answer_401_itself():
    found = [r for r in resources(FUNCTION_APP, "Microsoft.Web/sites/config") if r.body["name"] == "authsettingsV2"]
    assert len(found) == 1
    properties = found[0].body["properties"]
    assert properties["platform"]["enabled"] is True
    # anonymous requests reach the app, which answers 401 (operations/auth.py), never a login redirect for the API
    assert properties["globalValidation"] == {
        "requireAuthentication": False,
        "unauthenticatedClientAction": "AllowAnonymous",
    }
    assert properties["httpSettings"]["requireHttps"] is True
    aad = properties["identityProviders"]["azureActiveDirectory"]
    assert aad["enabled"] is True
    assert "clientSecretSettingName" not in aad["registration"]  # no secret in app settings
    assert param_default(FUNCTION_APP, "opsAuthClientId") == ""


def test_the_app_roles_of_the_registration_are_the_ones_the_code_checks():
    values = {role["value"]: role for role in APP_ROLES}
    assert set(values) == set(ROLES) == {READ_ROLE, OPERATE_ROLE}
    for role in values.values():
        assert "User" in role["allowedMemberTypes"]
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", role["id"])
        assert role["isEnabled"] is True and role["description"]
    assert len({role["id"] for role in APP_ROLES}) == len(APP_ROLES)


def test_the_ops_routes_are_anonymous_at_the_functions_level_only_because_the_guard_is_there():
    """Each ops function checks the principal first: its body calls check_access or the console guard."""
    tree = ast.parse((ROOT / "operations" / "blueprint.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("ops_"):
            calls = {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            assert calls & {"check_access", "_action_request", "_act", "_console_guard"}, node.name


# --- the workbook ------------------------------------------------------------------------------------


def _queries() -> dict[str, str]:
    names = ("ordersByState", "recoveries", "compensations", "alerts", "operatorActions")
    return {name: str(variable(WORKBOOK, name)) for name in names}


def emitted_fields() -> set[str]:
    """Every custom dimension the app logs: the keys of ``extra={...}`` dicts and the keyword
    arguments of ``app_event(...)`` (which become ``extra``)."""
    fields: set[str] = set()
    for tree in app_trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            for keyword in node.keywords:
                if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                    fields |= {str(k.value) for k in keyword.value.keys if isinstance(k, ast.Constant)}
                elif called == "app_event" and keyword.arg is not None:
                    fields.add(keyword.arg)
    return {str(f) for f in fields}


def test_every_field_the_workbook_queries_is_one_the_app_emits():
    fields = emitted_fields()
    assert {"event", "toState", "transition", "alertKind", "operator", "reason", "orderId"} <= fields
    for name, query in _queries().items():
        used = set(re.findall(r"Properties\.(\w+)", query)) | set(re.findall(r"Properties\[['\"](\w+)['\"]\]", query))
        assert used, name
        assert used - fields == set(), f"{name} queries fields the app never logs: {used - fields}"


def test_every_event_the_workbook_counts_is_one_the_app_emits():
    events = emitted_event_names(app_trees())
    states = {"Pending", "Processing", "Processed", "Error", "Compensating", "Compensated", "CompensationFailed"}
    for name, query in _queries().items():
        for clause in re.findall(r"Properties\.event\)\s*(?:==|in)\s*\(?([^)\n|]+)", query):
            named = set(re.findall(r'"(\w+)"', clause))
            assert named and named - events == set(), f"{name}: {named - events}"
        for clause in re.findall(r"Properties\.toState\)\s*(?:==|in)\s*\(?([^)\n|]+)", query):
            assert set(re.findall(r'"(\w+)"', clause)) <= states, name


def test_the_workbook_shows_each_query_on_the_workspace():
    workbook = resources(WORKBOOK, "Microsoft.Insights/workbooks")
    assert len(workbook) == 1
    assert workbook[0].body["kind"] == "shared"
    panels: Any = variable(WORKBOOK, "panels")
    shown = {str(getattr(p["content"].get("query"), "source", "")) for p in panels if p["type"] == 3}
    assert shown == set(_queries())  # every query is on a panel, and every panel is one of them
