"""The offline Bicep checker: the project's files pass the syntax, module, schema and rule checks,
and each kind of mistake is caught (on a copy of infra/ with one edit)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from contracts.names import ORDERS_QUEUE
from tests.infra.function_index import function_index
from tests.infra.paths import INFRA, ROOT
from tools.bicepcheck.azure_types import TypeLibrary, azmcp_binary
from tools.bicepcheck.checks import check_schemas, check_tree
from tools.bicepcheck.query import load, resources
from tools.bicepcheck.rules import RULES, TYPE_LIBRARY_GAPS, check_rules

MODULE = """
param name string
param size int = 1
output id string = '${name}-${size}'
"""

GOOD_MAIN = """
targetScope = 'subscription'
@description('where')
@metadata({
  azd: {
    type: 'location'
  }
})
param location string
var names = [for (n, i) in range(0, 2): '${location}-${n}-${i}']
var upper = map(names, (x) => toUpper(x))
resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: 'rg-${upper[0]}'
  location: location
}
module m './mod.bicep' = [for n in names: if (!empty(n)) {
  name: n
  scope: rg
  params: {
    name: n
  }
}]
module avm 'br/public:avm/res/foo/bar:0.4.1' = {
  name: 'avm'
  scope: rg
  params: {
    anything: m[0].outputs.id
  }
}
output first string = m[0].outputs.id
output fromRegistry string = avm.outputs.whatever
"""


def write(tmp_path: Path, main: str, module: str = MODULE) -> Path:
    (tmp_path / "mod.bicep").write_text(module)
    (tmp_path / "main.bicep").write_text(main)
    return tmp_path


def messages(root: Path) -> list[str]:
    return [f.message for f in check_tree(root)]


def test_project_bicep_has_no_findings():
    findings = check_tree(INFRA)
    assert findings == [], "\n".join(str(f) for f in findings)


def test_project_bicep_has_modules_to_check():
    assert len(list(INFRA.rglob("*.bicep"))) >= 5


def test_correct_files_pass_including_loops_lambdas_and_registry_modules(tmp_path):
    assert messages(write(tmp_path, GOOD_MAIN)) == []


def test_undefined_symbol(tmp_path):
    main = GOOD_MAIN.replace("location: location\n}", "location: locaton\n}")
    assert "undefined symbol 'locaton'" in messages(write(tmp_path, main))


def test_duplicate_symbol_and_output(tmp_path):
    main = GOOD_MAIN + "var names = []\noutput first string = 'x'\n"
    found = messages(write(tmp_path, main))
    assert "duplicate symbol 'names'" in found
    assert "duplicate output 'first'" in found


def test_unused_param(tmp_path):
    main = GOOD_MAIN + "param spare string = ''\n"
    assert "unused param 'spare'" in messages(write(tmp_path, main))


def test_missing_module_file(tmp_path):
    main = GOOD_MAIN.replace("'./mod.bicep'", "'./modules/absent.bicep'")
    assert "module file './modules/absent.bicep' not found" in messages(write(tmp_path, main))


def test_unknown_module_param(tmp_path):
    main = GOOD_MAIN.replace("    name: n\n  }", "    name: n\n    colour: 'red'\n  }")
    assert any("declares no param 'colour'" in m for m in messages(write(tmp_path, main)))


def test_required_module_param_not_passed(tmp_path):
    module = MODULE + "param required string\noutput r string = required\n"
    assert any("param 'required' of ./mod.bicep is required" in m for m in messages(write(tmp_path, GOOD_MAIN, module)))


def test_param_with_default_need_not_be_passed(tmp_path):
    # `size` has a default and GOOD_MAIN does not pass it.
    assert not any("'size'" in m for m in messages(write(tmp_path, GOOD_MAIN)))


def test_reference_to_undeclared_module_output(tmp_path):
    main = GOOD_MAIN.replace("output first string = m[0].outputs.id", "output first string = m[0].outputs.idd")
    assert "module 'm' has no output 'idd'" in messages(write(tmp_path, main))


def test_registry_module_must_be_pinned(tmp_path):
    main = GOOD_MAIN.replace("br/public:avm/res/foo/bar:0.4.1", "br/public:avm/res/foo/bar:latest")
    assert any("is not pinned" in m for m in messages(write(tmp_path, main)))


def test_syntax_error(tmp_path):
    main = GOOD_MAIN + "resource broken 'x@1' = {\n  name: \n"
    assert any("syntax error" in m for m in messages(write(tmp_path, main)))


def test_no_bicep_files_is_a_finding(tmp_path):
    assert messages(tmp_path) == ["no .bicep files found"]


# Schema check against Azure's published Bicep types (npm @azure/mcp) and the explicit rules.


@pytest.fixture(scope="session")
def library() -> TypeLibrary:
    binary = azmcp_binary(ROOT)
    if binary is None:
        pytest.fail("the azmcp binary of npm @azure/mcp is missing: run `python3 dev.py setup` (npm ci)")
    return TypeLibrary(binary)


def mutated_infra(tmp_path: Path, file: str, old: str, new: str) -> Path:
    """A copy of infra/ with one edit (which must apply)."""
    root = tmp_path / "infra"
    shutil.copytree(INFRA, root)
    target = root / file
    text = target.read_text()
    assert old in text, f"{old!r} not in {file}: update this test"
    target.write_text(text.replace(old, new, 1))
    return root


def schema_messages(root: Path, library: TypeLibrary) -> list[str]:
    return [f.message for f in check_schemas(root, library)[0]]


def rule_ids(root: Path) -> set[str]:
    return {f.rule for f in check_rules(root)}


def test_project_bicep_matches_the_published_types(library):
    findings, gaps = check_schemas(INFRA, library)
    assert findings == [], "\n".join(str(f) for f in findings)
    assert gaps <= TYPE_LIBRARY_GAPS, (
        f"types without a shipped schema not listed in rules.TYPE_LIBRARY_GAPS: {gaps - TYPE_LIBRARY_GAPS}"
    )


def test_schema_check_covers_most_resources(library):
    checked = [r for path in INFRA.rglob("*.bicep") for r in resources(load(path)) if library.is_shipped(r.type)]
    assert len(checked) >= 30


def test_listed_gaps_are_really_missing_from_the_library(library):
    """When a newer @azure/mcp ships one of these, the list must shrink (and the check grow)."""
    for type_name in TYPE_LIBRARY_GAPS:
        versions = library.versions(type_name)
        assert versions, f"{type_name} is not even indexed: remove it or fix its name"
        shipped = [v for v in versions if library.is_shipped(f"{type_name}@{v}")]
        assert shipped == [], f"{type_name} now ships {shipped}: remove it from TYPE_LIBRARY_GAPS"


@pytest.mark.parametrize(
    ("file", "old", "new", "expected"),
    [
        ("modules/storage.bicep", "allowBlobPublicAccess: false", "allowBlobPublicAcess: false", "unknown property"),
        (
            "modules/storage.bicep",
            "supportsHttpsTrafficOnly: true",
            "supportsHttpsTrafficOnly: 'yes'",
            "expected a boolean",
        ),
        ("modules/storage.bicep", "accessTier: 'Hot'", "accessTier: 'Warm'", "is not one of"),
        ("modules/storage.bicep", "accessTier: 'Hot'", "accessTier: 'Hot'\n    primaryEndpoints: {}", "read-only"),
        ("modules/cosmos.bicep", "failoverPriority: 0", "failoverPriority: -1", "below the minimum"),
        (
            "modules/functionapp.bicep",
            "Microsoft.Web/sites@2024-04-01' = {",
            "Microsoft.Web/sites@2099-01-01' = {",
            "not in the type index",
        ),
        ("modules/servicebus.bicep", "  name: 'Standard'\n", "", "required property missing"),
        ("modules/servicebus.bicep", "  tier: 'Premium'\n", "  tier: 'Premiun'\n", "is not one of"),
    ],
)
def test_schema_check_catches(library, tmp_path, file, old, new, expected):
    found = schema_messages(mutated_infra(tmp_path, file, old, new), library)
    assert any(expected in m for m in found), found


def test_every_rule_states_its_source():
    assert len({r.id for r in RULES}) == len(RULES)
    for rule in RULES:
        assert rule.statement and rule.source.startswith("https://learn.microsoft.com/"), rule.id


def test_project_bicep_follows_every_rule():
    findings = check_rules(INFRA)
    assert findings == [], "\n".join(str(f) for f in findings)


@pytest.mark.parametrize(
    ("file", "old", "new", "rule"),
    [
        (
            "modules/functionapp.bicep",
            "      minTlsVersion: '1.2'\n",
            "      minTlsVersion: '1.2'\n      ftpsState: 'Disabled'\n",
            "flex-no-ftps",
        ),
        (
            "modules/functionapp.bicep",
            "    MAX_PENDING: '1000'\n",
            "    MAX_PENDING: '1000'\n    FUNCTIONS_WORKER_RUNTIME: 'python'\n",
            "flex-no-deprecated-settings",
        ),
        ("modules/functionapp.bicep", "@allowed([\n  512\n", "@allowed([\n  1024\n", "flex-memory"),
        (
            "modules/functionapp.bicep",
            "@maxValue(1000)\nparam maximumInstanceCount",
            "@maxValue(2000)\nparam maximumInstanceCount",
            "flex-max-instances",
        ),
        ("modules/functionapp.bicep", "version: '3.13'", "version: '3.9'", "flex-python"),
        ("modules/alerts.bicep", "    skipQueryValidation: true\n", "", "log-alert-skip-query-validation"),
    ],
)
def test_rule_catches(tmp_path, file, old, new, rule):
    assert rule in rule_ids(mutated_infra(tmp_path, file, old, new))


@pytest.mark.parametrize(
    "setting",
    [
        # the Oryx build switches a Python app on other plans sets; Flex builds with azd's remote build
        "SCM_DO_BUILD_DURING_DEPLOYMENT",
        "ENABLE_ORYX_BUILD",
        "FUNCTIONS_WORKER_RUNTIME_VERSION",
        "FUNCTIONS_WORKER_PROCESS_COUNT",
        "WEBSITE_MAX_DYNAMIC_APPLICATION_SCALE_OUT",
        "WEBSITE_VNET_ROUTE_ALL",
        "WEBSITE_SKIP_CONTENTSHARE_VALIDATION",
        "scm_do_build_during_deployment",  # app setting names are case-insensitive
        "WEBSITE_TIME_ZONE",  # flex-consumption-plan, "Considerations": not supported (schedules stay UTC)
        "TZ",
        # the rest of the table (red team of the deployment: the rule missed these five)
        "FUNCTIONS_MAX_HTTP_CONCURRENCY",  # scaleAndConcurrency.triggers.http.perInstanceConcurrency instead
        "FUNCTIONS_WORKER_DYNAMIC_CONCURRENCY_ENABLED",
        "WEBSITE_CONTENTOVERVNET",
        "WEBSITE_DNS_SERVER",
        "WEBSITE_NODE_DEFAULT_VERSION",
    ],
)
def test_every_flex_deprecated_setting_is_caught(tmp_path, setting):
    """The deprecations table of the app settings reference (FLEX_DEPRECATIONS), not only the runtime and
    content-share settings."""
    mutated = mutated_infra(tmp_path, "modules/functionapp.bicep", "    MAX_PENDING: '1000'\n",
                            f"    MAX_PENDING: '1000'\n    {setting}: 'true'\n")  # fmt: skip
    assert "flex-no-deprecated-settings" in rule_ids(mutated)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # siteConfig properties of other plans (linuxFxVersion is where a Bicep for Linux Consumption puts the runtime)
        ("      http20Enabled: true\n", "      http20Enabled: true\n      alwaysOn: false\n"),
        ("      http20Enabled: true\n", "      http20Enabled: true\n      linuxFxVersion: 'Python|3.13'\n"),
        ("      http20Enabled: true\n", "      http20Enabled: true\n      functionAppScaleLimit: 40\n"),
        ("      http20Enabled: true\n", "      http20Enabled: true\n      use32BitWorkerProcess: false\n"),
        ("      http20Enabled: true\n", "      http20Enabled: true\n      PreWarmedInstanceCount: 1\n"),
        # and on the site itself (networking is the site's VNet integration on Flex)
        ("    httpsOnly: true\n", "    httpsOnly: true\n    vnetRouteAllEnabled: true\n"),
        ("    httpsOnly: true\n", "    httpsOnly: true\n    vnetContentShareEnabled: true\n"),
    ],
)
def test_every_flex_deprecated_site_property_is_caught(tmp_path, old, new):
    """The site properties of the same deprecations table (FLEX_DEPRECATIONS): before, only ftpsState was refused."""
    mutated = mutated_infra(tmp_path, "modules/functionapp.bicep", old, new)
    assert "flex-no-deprecated-site-properties" in rule_ids(mutated)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("category: 'OperationalLogs'", "category: 'OperationLogs'"),
        ("category: 'OperationalLogs'", "categoryGroup: 'allLogs'"),
        ("scope: functionApp\n", "scope: functionAppp\n"),
    ],
)
def test_diagnostic_category_rule_catches(tmp_path, old, new):
    assert "diagnostic-categories" in rule_ids(mutated_infra(tmp_path, "modules/diagnostics.bicep", old, new))


def always_ready_block() -> str:
    """The alwaysReady lines docs/deploy.md ("Scale from zero") tells an operator to add to functionapp.bicep."""
    doc = (ROOT / "docs" / "deploy.md").read_text()
    section = doc[doc.index("### Scale from zero") :]
    section = section[: section.index("\n### ", 1)]
    match = re.search(r"```bicep\n(.*?)```", section, flags=re.DOTALL)
    assert match, "no ```bicep block in docs/deploy.md, 'Scale from zero'"
    return match.group(1)


def test_the_always_ready_block_of_the_deploy_doc_names_every_function_a_step_waits_for(library, tmp_path):
    """A step's deadline (STEP_TIMEOUT_SECONDS) covers the agent's Service Bus trigger and the reply relay, each scaled
    from zero on its own instances by Flex Consumption, and the Durable group (docs/deploy.md, "Scale from zero"). The
    block the doc offers keeps exactly those warm, by the names the host gives them ('function:<name>', the 'durable'
    group), and it passes the offline checks where the doc says to put it. The intake (the orders queue) starts no
    deadline. Before, the doc said a cold start was no failure ("the deadlines are minutes") and offered the Durable
    group alone."""
    block = always_ready_block()
    service_bus = {
        function["name"]: binding["queueName"]
        for function in function_index()
        for binding in function["bindings"]
        if binding["type"] == "serviceBusTrigger"
    }
    expected = {"durable"} | {f"function:{name}" for name, queue in service_bus.items() if queue != ORDERS_QUEUE}
    assert set(re.findall(r"name: '([^']+)'", block)) == expected
    anchor = "        instanceMemoryMB: instanceMemoryMB\n"
    root = mutated_infra(tmp_path, "modules/functionapp.bicep", anchor, anchor + block)
    assert check_tree(root) == []
    assert schema_messages(root, library) == []
    assert check_rules(root) == []
