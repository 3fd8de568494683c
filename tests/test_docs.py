"""The README stays true of the code: its settings table is the one ``settings.py`` generates, the
two commands come first, the example profiles it names exist (and it names them all), and the local
runner's command line and fault-profile keys it documents are the ones the code accepts, and the
event names it lists are the ones the app emits."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from localrun.profile import AGENT_KEYS, COSMOS_KEYS, HOST_KEYS, ORDER_KEYS, REMOTE_KEYS, SERVICEBUS_KEYS, TOP_KEYS
from settings import settings_table

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
START, END = "<!-- settings-table:start -->", "<!-- settings-table:end -->"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)


def code_blocks() -> list[str]:
    return FENCE.findall(README)


def section(title: str) -> str:
    """The text of the README section whose heading is ``title``, up to the next heading of its level
    or higher."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", README, flags=re.MULTILINE)
    assert match, f"no section {title!r} in the README"
    level = len(match.group(1))
    rest = README[match.end() :]
    following = re.search(rf"^#{{1,{level}}} ", rest, flags=re.MULTILINE)
    return rest[: following.start()] if following else rest


def test_settings_block_is_exactly_the_generated_table():
    assert README.count(START) == 1 and README.count(END) == 1
    block = README[README.index(START) + len(START) : README.index(END)]
    assert block.strip("\n") == settings_table()


def test_the_first_code_block_is_the_two_commands():
    first = code_blocks()[0]
    commands = [line.split("#", 1)[0].strip() for line in first.splitlines() if line.strip()]
    assert commands == ["python3 dev.py demo", "python3 dev.py test"]
    assert README.index("```") < README.index("\n## "), "the commands must come before the first section"


def test_every_example_profile_named_exists_and_every_profile_is_named():
    named = set(re.findall(r"examples/profiles/([\w.-]+?\.json)", README))
    assert named, "the README names no example profile"
    on_disk = {p.name for p in (ROOT / "examples" / "profiles").glob("*.json")}
    assert named - on_disk == set(), "named in the README but missing"
    assert on_disk - named == set(), "in examples/profiles/ but not described in the README"


def test_the_demo_command_runs_the_profile_the_readme_names():
    dev = (ROOT / "dev.py").read_text(encoding="utf-8")
    for value in ("examples/profiles/demo.json", "out/demo-report.json", "out/demo-chart.png", '"200"', '"7"'):
        assert value in dev
    assert "--orders 200 --seed 7 --faults examples/profiles/demo.json" in README


def test_the_documented_command_line_is_the_one_the_runner_accepts():
    runner = section("Command line")
    synopsis = next(block for block in code_blocks() if "python -m localrun simulate" in block)
    help_text = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    accepted = set(re.findall(r"--[a-z][a-z-]*", help_text)) - {"--help"}
    assert set(re.findall(r"--[a-z][a-z-]*", synopsis)) <= accepted
    assert accepted <= set(re.findall(r"--[a-z][a-z-]*", runner)), "an option the README does not document"


def test_every_fault_profile_key_is_documented():
    documented = section("Fault profile (`localrun/profile.py`)")
    # every component of every dotted name in backticks: `remote.<service>.outages` -> remote, outages
    components = {part for name in re.findall(r"`([^`]+)`", documented) for part in name.split(".")}
    keys = TOP_KEYS | AGENT_KEYS | REMOTE_KEYS | COSMOS_KEYS | SERVICEBUS_KEYS | HOST_KEYS | ORDER_KEYS
    assert keys - components == set(), "fault profile keys the README does not document"


def test_relative_links_point_at_files_that_exist():
    targets = re.findall(r"\]\(((?!https?://)[^)#]+)(?:#[^)]*)?\)", README)
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []


APP_SKIPS = {"tests", "localrun", "tools", "node_modules", "docs", "examples", "infra"}


def app_trees() -> list[ast.Module]:
    trees = []
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] not in APP_SKIPS and not parts[0].startswith("."):
            trees.append(ast.parse(path.read_text(encoding="utf-8")))
    return trees


def emitted_event_names(trees: list[ast.Module]) -> set[str]:
    """Names the app logs directly: ``app_event("<name>", ...)`` and ``{"event": "<name>"}``."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if called == "app_event" and node.args and isinstance(node.args[0], ast.Constant):
                    names.add(str(node.args[0].value))
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "event" and isinstance(value, ast.Constant):
                        names.add(str(value.value))
    return names


def string_constants(trees: list[ast.Module]) -> set[str]:
    return {
        n.value for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_the_event_names_listed_are_the_ones_the_app_emits():
    table = section("Observability (`observability/`)").split("| area | events |", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    listed = {name for row in rows for name in re.findall(r"`(\w+)`", row.split("|")[2])}
    trees = app_trees()
    emitted = emitted_event_names(trees)
    assert emitted, "found no event names in the app"
    # Some names are passed through a variable (e.g. the starter's per-orchestrator events): every
    # listed name must at least be a string in the app, and every name logged directly must be listed.
    assert listed - string_constants(trees) == set(), "listed in the README but nowhere in the app"
    assert emitted - listed == set(), "emitted by the app but not listed in the README"


def test_npm_test_runs_the_readme_test_command() -> None:
    import json

    scripts = json.loads((ROOT / "package.json").read_text())["scripts"]
    assert scripts["test"] == "python3 dev.py test"
    assert "`npm test` runs the same" in README
