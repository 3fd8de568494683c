"""The offline Bicep checker: the project's files pass, and each kind of mistake is caught."""

from __future__ import annotations

from pathlib import Path

from tests.infra.paths import INFRA
from tools.bicepcheck.checks import check_tree

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
