"""The README and ``docs/`` stay true of the code and of each other.

- README.md: at most 200 lines, the two commands first, "Deploy to Azure" within its first 100 lines
  with the azd sequence, the demo command ``dev.py`` runs, the ops API's routes the app serves and the
  fields of its summary and order page.
- docs/deploy.md: the first order it sends is one the app accepts, on the queues the app has; every message a
  ```json block of the docs shows parses as its contract.
- docs/settings.md: the settings table is exactly the one ``settings.py`` generates.
- docs/local-runner.md: the example profiles it names exist (and it names them all), the command
  line and the fault-profile keys are the ones the runner accepts; every runner command README.md
  and docs/ show (but docs/benchmark.md's log) is one the runner accepts; its Report section names every
  field the report has; every runner option says what it does in ``--help``.
- dev.py: every command and ``bench`` option is shown in README.md or docs/, and every one shown is one it takes.
- docs/design.md: the invariants are the ones the report counts, the messages the ones in
  ``contracts/messages.py``, the Roles table's functions the ones ``function_app`` registers, and the
  project layout names every top-level entry of the repository.
- docs/observability.md: the event names listed are the ones the app emits; its alert rules table is the Bicep's
  log alert rules, each with the events it pages on (and docs/deploy.md counts them); a level a page gives an
  event is one the app logs it at.
- Every snake_case or CamelCase name the docs show in code font is a word of the repository (or listed, with
  why, in ``NAMED_ELSEWHERE``).
- Every relative link in README.md and docs/*.md resolves, and no tracked text file refers to a path
  outside the repository.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from localrun.profile import (
    ADMISSION_KEYS,
    AGENT_KEYS,
    COSMOS_KEYS,
    DURABLE_KEYS,
    HOST_KEYS,
    ORDER_KEYS,
    REMOTE_KEYS,
    SERVICEBUS_KEYS,
    STATUS_QUEUE_KEYS,
    TOP_KEYS,
)
from settings import KEY_SETTINGS, SETTINGS, settings_table

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
START, END = "<!-- settings-table:start -->", "<!-- settings-table:end -->"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)
# [text](target) and ![alt](target): the target up to an optional #anchor
LINK = re.compile(r"\]\(((?!https?://|mailto:)[^)#\s]*)(?:#[^)]*)?\)")


def read(relative: str) -> str:
    return (ROOT / relative).read_text(encoding="utf-8")


README = read("README.md")


def code_blocks(text: str) -> list[str]:
    return FENCE.findall(text)


def section(text: str, title: str) -> str:
    """The part of ``text`` under the heading ``title``, up to the next heading of its level or higher."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", text, flags=re.MULTILINE)
    assert match, f"no section {title!r}"
    level = len(match.group(1))
    rest = text[match.end() :]
    following = re.search(rf"^#{{1,{level}}} ", rest, flags=re.MULTILINE)
    return rest[: following.start()] if following else rest


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the Markdown tables in ``text``, as cells."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("|---")
    ]


# README.md


def test_the_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200


def test_deploy_to_azure_comes_within_the_first_100_lines_with_the_azd_sequence():
    lines = README.splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("## ") and "Deploy to Azure" in line)
    assert heading < 100
    deploy = section(README, lines[heading].removeprefix("## "))
    position = 0
    for step in ("azd auth login", "azd env new", "azd env set AZURE_LOCATION", "azd up", "azd down --purge"):
        found = deploy.find(step, position)
        assert found != -1, f"{step!r} missing (or out of order) under Deploy to Azure"
        position = found
    for link in ("docs/deploy.md#send-a-first-order", "docs/deploy.md#watch-it"):
        assert link in deploy


def test_the_first_code_block_is_the_two_commands():
    first = code_blocks(README)[0]
    commands = [line.split("#", 1)[0].strip() for line in first.splitlines() if line.strip()]
    assert commands == ["python3 dev.py demo", "python3 dev.py test"]
    assert README.index("```") < README.index("\n## "), "the commands must come before the first section"


def test_the_demo_command_runs_the_profile_the_readme_names():
    dev = read("dev.py")
    for value in ("examples/profiles/demo.json", "out/demo-report.json", "out/demo-chart.png", '"200"', '"7"'):
        assert value in dev
    assert "--orders 200 --seed 7 --faults examples/profiles/demo.json" in README


def test_the_readme_keeps_the_message_flow_picture():
    picture = section(README, "What it is")
    assert any("submit_order" in block and "supervisor" in block for block in code_blocks(picture))


def test_the_ops_routes_in_the_readme_are_the_ones_the_app_serves():
    """The README's Operate it table is the ops API's only reference: each row's method and path is a route
    of ``operations/blueprint.py`` and each route is a row (but the console's own script and style)."""
    rows = table_rows(section(README, "Operate it"))
    documented = {re.sub(r"\?.*", "", row[0].strip("`")) for row in rows if re.match(r"`(GET|POST) /api/", row[0])}
    blueprint = read("operations/blueprint.py")
    served = {
        f"{method} /api/{route}"
        for route, methods in re.findall(r'@bp\.route\(route="([^"]+)", methods=\[([^\]]+)\]', blueprint)
        for method in re.findall(r'"(\w+)"', methods)
    }
    assert len(served) >= 8, "found too few routes in operations/blueprint.py"
    assert documented == served - {"GET /api/ops/console/{asset}"}


def returned_keys(module: str, *functions: str) -> set[str]:
    """The keys of the dict literals ``functions`` of ``module`` return."""
    tree = ast.parse(read(module))
    found = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {
        str(key.value)
        for name in functions
        for node in ast.walk(found[name])
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict)
        for key in node.value.keys
        if isinstance(key, ast.Constant)
    }


def test_every_field_of_the_ops_summary_and_order_page_is_named_in_the_readme():
    """The README's rows named few of the fields the summary and the order's page return (``oldestProcessing``,
    the lists' totals ``waitingForReviewCount``..., ``statusesSent``, ``instances``): a client had to find
    them in ``operations/``."""
    rows = {row[0]: row[2] for row in table_rows(section(README, "Operate it"))}
    shapes = {
        "`GET /api/ops/summary`": returned_keys("operations/views.py", "summary", "_recent_alerts_or_why_not"),
        "`GET /api/ops/orders/{orderId}`": returned_keys("operations/views.py", "order_detail")
        | returned_keys("operations/instances.py", "describe_or_why_not"),
    }
    for route, keys in shapes.items():
        assert len(keys) > 10, f"found too few fields of {route}"
        missing = keys - set(re.findall(r"`(\w+)`", rows[route]))
        assert missing == set(), f"{route}: fields the README does not name"


def test_npm_test_runs_the_readme_test_command() -> None:
    scripts = json.loads(read("package.json"))["scripts"]
    assert scripts["test"] == "python3 dev.py test"
    assert "`npm test` runs the same" in README


def refusal(body: str, kind: str, contract: Any) -> list[str]:
    """Why ``contracts.parsing.parse`` refuses ``body`` as the message ``kind`` (``contract``); empty: it takes it.
    (Its ``InvalidMessage`` is a frozen dataclass that pytest cannot attach a traceback to: it is reported here.)"""
    from contracts.parsing import InvalidMessage, parse

    try:
        parse(body, {kind: contract})
    except InvalidMessage as exc:
        return [str(exc)]
    return []


def test_the_first_order_deploy_md_sends_is_one_the_app_accepts():
    """docs/deploy.md's "Send a first order" is the first thing a user runs against a deployment: its order is an
    ``OrderSubmitted`` the contract takes, sent to the app's ``orders`` queue and asking for its statuses on the
    example status queue, which "Watch it" reads."""
    from contracts.messages import OrderSubmitted
    from contracts.names import EXAMPLE_STATUS_QUEUE, ORDERS_QUEUE

    deploy = read("docs/deploy.md")
    [script] = [block for block in code_blocks(section(deploy, "Send a first order")) if "order = {" in block]
    literal = re.search(r"^order = (\{.*?^\})", script, flags=re.MULTILINE | re.DOTALL)
    assert literal, "no `order = {...}` in docs/deploy.md's first order"
    order = ast.literal_eval(literal.group(1))
    assert refusal(json.dumps(order), "OrderSubmitted", OrderSubmitted) == []
    assert order["replyTo"] == EXAMPLE_STATUS_QUEUE
    assert f'get_queue_sender("{ORDERS_QUEUE}")' in script
    assert f'get_queue_receiver("{EXAMPLE_STATUS_QUEUE}"' in section(deploy, "Watch it")


def test_every_message_a_json_block_in_the_docs_shows_is_one_its_contract_takes():
    """A ```json block showing a message (deferral.md's ``StatusUpdate``) is what a submitter codes against: it
    is a message of ``contracts/messages.py`` that parses as that contract."""
    import contracts.messages as messages

    fence = re.compile(r"^```json\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)
    checked, refused = 0, []
    for page in markdown_pages():
        for block in fence.findall(page.read_text(encoding="utf-8")):
            shown = json.loads(block)
            if isinstance(shown, dict) and "type" in shown:
                contract = getattr(messages, shown["type"], None)
                assert contract is not None, f"{page.relative_to(ROOT)}: no message {shown['type']!r}"
                refused += [f"{page.relative_to(ROOT)}: {why}" for why in refusal(block, shown["type"], contract)]
                checked += 1
    assert checked, "found no message in a json block of the docs"
    assert refused == []


# docs/settings.md


def test_settings_block_is_exactly_the_generated_table():
    doc = read("docs/settings.md")
    assert doc.count(START) == 1 and doc.count(END) == 1
    block = doc[doc.index(START) + len(START) : doc.index(END)]
    assert block.strip("\n") == settings_table()
    assert START not in README, "the settings table lives in docs/settings.md only"


def test_readme_key_settings_block_is_the_generated_table_of_key_settings():
    start, end = "<!-- key-settings:start -->", "<!-- key-settings:end -->"
    assert README.count(start) == 1 and README.count(end) == 1
    block = README[README.index(start) + len(start) : README.index(end)]
    assert block.strip("\n") == settings_table(KEY_SETTINGS)
    assert set(KEY_SETTINGS) <= {s.name for s in SETTINGS}


def test_every_other_settings_table_in_docs_agrees_with_settings_py():
    """A page that tabulates some settings (docs/supervisor.md does) shows the defaults settings.py has."""
    defaults = {s.name: s.default for s in SETTINGS}
    checked = 0
    for page in sorted(DOCS.glob("*.md")):
        if page.name == "settings.md":
            continue
        for table in re.split(r"\n(?!\|)", page.read_text(encoding="utf-8")):
            lines = [line for line in table.splitlines() if line.startswith("|")]
            if len(lines) < 3:
                continue
            header = [cell.strip() for cell in lines[0].strip().strip("|").split("|")]
            if "name" not in header or "default" not in header:
                continue
            for row in table_rows("\n".join(lines[1:])):
                name, default = row[header.index("name")].strip("`"), row[header.index("default")]
                if name in defaults:
                    expected = f"`{defaults[name]}`" if defaults[name] else "(empty)"
                    assert default == expected, f"{page.name}: {name} default {default}, settings.py {expected}"
                    checked += 1
    assert checked, "no settings table outside docs/settings.md: drop this test or the pages' tables"


# docs/local-runner.md

RUNNER = read("docs/local-runner.md")


def test_every_example_profile_named_exists_and_every_profile_is_named():
    named = set(
        re.findall(r"examples/profiles/([\w.-]+?\.json)", section(RUNNER, "Example profiles (`examples/profiles/`)"))
    )
    assert named, "docs/local-runner.md names no example profile"
    on_disk = {p.name for p in (ROOT / "examples" / "profiles").glob("*.json")}
    assert named - on_disk == set(), "named in docs/local-runner.md but missing"
    assert on_disk - named == set(), "in examples/profiles/ but not described in docs/local-runner.md"


def test_the_documented_command_line_is_the_one_the_runner_accepts():
    runner = section(RUNNER, "Command line")
    synopsis = next(block for block in code_blocks(runner) if "python -m localrun simulate" in block)
    help_text = subprocess.run(
        [sys.executable, "-m", "localrun", "simulate", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    accepted = set(re.findall(r"--[a-z][a-z-]*", help_text)) - {"--help"}
    assert set(re.findall(r"--[a-z][a-z-]*", synopsis)) <= accepted
    assert accepted <= set(re.findall(r"--[a-z][a-z-]*", runner)), "an option docs/local-runner.md does not document"


def test_every_runner_command_has_its_synopsis_with_every_option():
    """``serve`` (the README's console) and ``fuzz`` each have a synopsis in docs/local-runner.md naming
    every option they take; ``serve`` had none, and its ``--exit-when-done`` was documented nowhere."""
    for command in ("simulate", "serve", "fuzz"):
        synopsis = next(
            (
                line
                for block in code_blocks(section(RUNNER, "Command line"))
                for line in block.splitlines()
                if line.startswith(f"python -m localrun {command} ")
            ),
            None,
        )
        assert synopsis, f"docs/local-runner.md shows no synopsis of `python -m localrun {command}`"
        help_text = subprocess.run(
            [sys.executable, "-m", "localrun", command, "--help"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        accepted = set(re.findall(r"--[a-z][a-z-]*", help_text)) - {"--help"}
        assert set(re.findall(r"--[a-z][a-z-]*", synopsis)) == accepted, command


# A runner command the docs show: `python -m localrun <sub> ...` or `dev.py demo <sub> ...` (a command after demo
# replaces demo's arguments), in a code span (which may wrap) or on a line of a code block (up to a `#` comment).
RUNNER_COMMAND = re.compile(r"(?:-m localrun|dev\.py demo) ((?:simulate|serve|fuzz)\b[^`#\n]*(?:\n[^`#\n]+)*)")
# docs/benchmark.md is a log of the runs as they were made, not instructions
COMMAND_PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p.name != "benchmark.md")]


def runner_commands(text: str) -> list[str]:
    spans = re.findall(r"`([^`]+)`", FENCE.sub("", text))
    lines = [line.split("#", 1)[0] for block in code_blocks(text) for line in block.splitlines()]
    return [" ".join(m.split()) for piece in spans + lines for m in RUNNER_COMMAND.findall(piece)]


def test_every_runner_command_the_docs_show_is_one_the_runner_accepts():
    from localrun.__main__ import command_line

    refused = []
    checked = 0
    for page in COMMAND_PAGES:
        for command in runner_commands(page.read_text(encoding="utf-8")):
            if "[" in command:  # a synopsis (`[--chart CHART.png]`): the command line section checks those
                continue
            # a placeholder in capitals (`--seed S`, `--orders N`) stands for a number
            args = [re.sub(r"^[A-Z]+$", "1", arg) for arg in command.split()]
            try:
                command_line().parse_args(args)
            except SystemExit:
                refused.append(f"{page.relative_to(ROOT)}: {command}")
            checked += 1
    assert checked, "found no runner command in the docs"
    assert refused == []


def test_runner_commands_are_found_in_spans_that_wrap_and_in_code_blocks():
    text = "so did `python -m localrun simulate --orders 1\n--seed 1` and\n"
    text += "```bash\npython3 dev.py demo serve --port 0  # x\n```\n"
    assert runner_commands(text) == ["simulate --orders 1 --seed 1", "serve --port 0"]


def test_every_runner_option_says_in_its_help_what_it_does():
    """``python -m localrun COMMAND --help`` is where a user looks first: ``--no-progress``, ``serve``'s
    ``--log-level``, ``--orders``, ``--seed``, ``--report`` and ``--chart`` said nothing there (found walking
    through the README)."""
    import argparse

    from localrun.__main__ import command_line

    commands = next(a for a in command_line()._actions if isinstance(a, argparse._SubParsersAction))
    silent = [
        f"{name} {action.option_strings[0]}"
        for name, parser in commands.choices.items()
        for action in parser._actions
        if action.option_strings and action.option_strings[0] != "-h" and not action.help
    ]
    assert silent == []


def _shown(text: str) -> list[str]:
    """The code spans of ``text`` and the lines of its code blocks (each up to a ``#`` comment)."""
    spans = re.findall(r"`([^`]+)`", FENCE.sub("", text))
    return spans + [line.split("#", 1)[0] for block in code_blocks(text) for line in block.splitlines()]


def test_every_dev_py_command_and_bench_option_is_documented_and_every_one_shown_exists():
    """``python3 dev.py COMMAND`` (README, docs/testing.md) and ``bench``'s options (docs/benchmark.md): each one
    dev.py takes is shown somewhere, and each one shown is one dev.py takes."""
    from tests.test_dev_test import load_dev

    dev = load_dev()
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    shown = [piece for page in pages for piece in _shown(page.read_text(encoding="utf-8"))]
    commands = {m for piece in shown for m in re.findall(r"dev\.py ([a-z][a-z-]*)", piece)}
    assert commands == set(dev.COMMANDS)
    bench = {
        m
        for piece in shown
        for tail in re.findall(r"(?:dev\.py |^)bench\b([^`#\n]*)", piece.strip())
        for m in re.findall(r"--[a-z-]+", tail)
    }
    assert bench == {*dev.BENCH_FLAGS, *dev.BENCH_VALUE_OPTIONS}


def test_every_fault_profile_key_is_documented():
    documented = section(RUNNER, "Fault profile (`localrun/profile.py`)")
    # every component of every dotted name in backticks: `remote.<service>.outages` -> remote, outages
    components = {part for name in re.findall(r"`([^`]+)`", documented) for part in name.split(".")}
    keys = (
        TOP_KEYS
        | AGENT_KEYS
        | REMOTE_KEYS
        | COSMOS_KEYS
        | SERVICEBUS_KEYS
        | HOST_KEYS
        | DURABLE_KEYS
        | ORDER_KEYS
        | STATUS_QUEUE_KEYS
        | ADMISSION_KEYS
    )
    assert keys - components == set(), "fault profile keys docs/local-runner.md does not document"


def report_keys() -> dict[str, set[str]]:
    """The keys of the dict ``build_report`` returns (``localrun/report.py``), under "", and the keys of each
    section that is a dict literal there, under the section's key; ``operator_actions`` is added after."""
    tree = ast.parse(read("localrun/report.py"))
    build = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_report")
    literal = next(
        n.value
        for n in ast.walk(build)
        if isinstance(n, ast.AnnAssign)
        and isinstance(n.target, ast.Name)
        and n.target.id == "report"
        and isinstance(n.value, ast.Dict)
    )
    keys: dict[str, set[str]] = {"": {"operator_actions"}}
    for key, value in zip(literal.keys, literal.values, strict=True):
        if isinstance(key, ast.Constant):
            keys[""].add(str(key.value))
            if isinstance(value, ast.Dict):
                keys[str(key.value)] = {str(k.value) for k in value.keys if isinstance(k, ast.Constant)}
    return keys


def test_every_report_field_is_documented():
    """The Report section names every field of the report, and every field of the sections it lists in
    braces (`recoveries` {...}); `x_p99` is written `x_p50`/`_p99`. The `runtime` section has its own
    paragraph above."""
    report = section(RUNNER, "Report (`localrun/report.py`)")
    named = set(re.findall(r"`(\w+)`", report))
    keys = report_keys()
    assert len(keys[""]) > 20, "found too few report keys"
    missing = sorted(k for k in keys[""] if k not in named and k != "runtime")
    assert "`runtime`" in RUNNER
    for part in ("recoveries", "deferred", "latency_s"):
        documented = re.search(rf"`{part}` \{{(.*?)\}}", report, flags=re.DOTALL)
        assert documented, f"the Report section does not list {part}'s fields in braces"
        listed = set(re.findall(r"`(\w+)`", documented.group(1)))
        missing += [f"{part}.{k}" for k in sorted(keys[part]) if re.sub(r"_p99$", "_p50", k) not in listed]
    assert missing == []


# docs/design.md

DESIGN = read("docs/design.md")


def report_invariants() -> set[str]:
    """The keys of the ``invariants = {...}`` dict in ``localrun/report.py``."""
    tree = ast.parse(read("localrun/report.py"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "invariants" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return {str(k.value) for k in node.value.keys if isinstance(k, ast.Constant)}
    raise AssertionError("no `invariants = {...}` in localrun/report.py")


def test_the_invariants_in_the_design_are_the_ones_the_report_counts():
    rows = table_rows(section(DESIGN, "Invariants"))
    listed = {m.group(1) for row in rows if (m := re.fullmatch(r"`(\w+)`", row[0]))}
    counted = report_invariants()
    assert counted, "found no invariants in the report"
    assert listed == counted


def test_the_messages_in_the_design_are_the_contracts():
    rows = table_rows(section(DESIGN, "Contracts"))
    listed = {m.group(1) for row in rows if (m := re.fullmatch(r"`(\w+)`", row[0]))}
    tree = ast.parse(read("contracts/messages.py"))
    # every model with a `type: Literal["<Name>"]` field is a message on some queue
    messages = {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(
            isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id == "type" for s in node.body
        )
    }
    assert messages, "found no message models"
    assert listed == messages


def test_the_roles_table_names_every_registered_function_and_no_other():
    """design.md's Roles table is where a reader looks up what a function name in a log or the portal is."""
    rows = table_rows(section(DESIGN, "Roles"))
    listed = {name for row in rows for name in re.findall(r"`([\w-]+)`", row[2])}
    listed_by = subprocess.run(
        [
            sys.executable,
            "-c",
            "import function_app; print(*(f.get_function_name() for f in function_app.app.get_functions()))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    registered = set(listed_by.split())
    assert len(registered) > 30, "found too few registered functions"
    assert registered - listed == set(), "registered but not in docs/design.md's Roles table"
    assert listed - registered == set(), "in docs/design.md's Roles table but not registered"


# top-level entries a reader of a clone need not be told about: git's own files
UNLISTED_TOP_LEVEL = {".gitignore", ".gitattributes", "README.md"}


def test_the_project_layout_names_every_top_level_entry():
    """A new user's first `ls` shows `dev.py`, the command the README starts with: the layout table
    in docs/design.md, the map of the repository, left it out (and `pyproject.toml`, `.funcignore`)."""
    rows = table_rows(section(DESIGN, "Project layout"))
    named = {token.split("/")[0] for row in rows for token in re.findall(r"`([^`]+)`", row[0])}
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    top = {name.split("/")[0] for name in listed.decode("utf-8").split("\0") if name}
    assert top - named - UNLISTED_TOP_LEVEL == set(), "tracked at the top level but not in docs/design.md's layout"


def test_the_design_has_every_state_in_its_state_machine():
    moves = section(DESIGN, "State machine")
    for state in ("Pending", "Processing", "Processed", "Error", "Compensating", "Compensated", "CompensationFailed"):
        assert f"`{state}`" in moves


# docs/observability.md

APP_SKIPS = {"tests", "localrun", "tools", "node_modules", "docs", "examples", "infra"}


def app_trees() -> list[ast.Module]:
    trees = []
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] not in APP_SKIPS and not parts[0].startswith("."):
            trees.append(ast.parse(path.read_text(encoding="utf-8")))
    return trees


def emitted_event_names(trees: list[ast.Module]) -> set[str]:
    """Names the app logs directly: ``app_event("<name>", ...)``, ``{"event": "<name>"}``, and an orchestration's
    ``log_error_once(context, "<name>", ...)`` (``orchestrators/logged.py``)."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if called == "app_event" and node.args and isinstance(node.args[0], ast.Constant):
                    names.add(str(node.args[0].value))
                if called == "log_error_once" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                    names.add(str(node.args[1].value))
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "event" and isinstance(value, ast.Constant):
                        names.add(str(value.value))
    return names


# an event name's shape: CamelCase of two words or more (`AttemptStarted`)
EVENT_SHAPE = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+")


def event_names_through_variables(trees: list[ast.Module]) -> set[str]:
    """Names a module passes to ``app_event`` through a variable, where it writes them out: the constant given to a
    function of its own that hands that parameter to ``app_event`` (``_not_sent("StatusMovedOn", ...)``), and, in a
    tuple, one in the first place (``("DependencyOutage", logging.WARNING)``) or a tuple of such names only
    (``START_EVENTS``). Read in the modules that call ``app_event`` with a name not written out, only."""

    def named(node: ast.expr) -> str | None:
        value = node.value if isinstance(node, ast.Constant) else None
        return value if isinstance(value, str) and EVENT_SHAPE.fullmatch(value) else None

    names: set[str] = set()
    for tree in trees:
        wrappers: dict[str, int] = {}
        dynamic = False
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            parameters = [a.arg for a in function.args.args]
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "app_event" and node.args:
                    given = node.args[0]
                    dynamic = dynamic or not isinstance(given, ast.Constant)
                    if isinstance(given, ast.Name) and given.id in parameters:
                        wrappers[function.name] = parameters.index(given.id)
        if not dynamic:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple) and node.elts:
                shaped = [named(e) for e in node.elts]
                names.update(n for n in (shaped if all(shaped) else shaped[:1]) if n)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in wrappers:
                at = wrappers[str(getattr(node.func, "id", ""))]
                if len(node.args) > at and (name := named(node.args[at])):
                    names.add(name)
    return names


def string_constants(trees: list[ast.Module]) -> set[str]:
    return {
        n.value for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CATALOGUE_HEADER = "| event | level | pages | when / what it means |"
# an event's level column: one level, or the levels it is logged at joined by ", " (its row says when each)
LEVEL_CELL = re.compile(rf"({'|'.join(LEVELS)})(, ({'|'.join(LEVELS)}))*")


@dataclass(frozen=True)
class CatalogueRow:
    area: str
    event: str
    level: str
    pages: str


def event_catalogue() -> list[CatalogueRow]:
    """docs/observability.md's event catalogue: one ``###`` subsection per area of "Events (`observability/`)",
    each a table of one row per event (its name alone in the first cell), in the order of the page."""
    return catalogue_rows(section(read("docs/observability.md"), "Events (`observability/`)"))


def catalogue_rows(text: str) -> list[CatalogueRow]:
    rows = []
    for area in re.split(r"^### ", text, flags=re.MULTILINE)[1:]:
        title, body = area.split("\n", 1)
        assert CATALOGUE_HEADER in body, f"### {title}: no table {CATALOGUE_HEADER}"
        for cells in table_rows(body.split(CATALOGUE_HEADER, 1)[1]):
            assert len(cells) == 4, f"### {title}: a row of {len(cells)} cells: {cells[0]}"
            name = re.fullmatch(r"`(\w+)`", cells[0])
            assert name, f"### {title}: a row's first cell is not one event name: {cells[0]}"
            rows.append(CatalogueRow(title, name.group(1), cells[1], cells[2]))
    return rows


def test_the_event_names_listed_are_the_ones_the_app_emits():
    listed = {row.event for row in event_catalogue()}
    trees = app_trees()
    emitted = emitted_event_names(trees)
    assert emitted, "found no event names in the app"
    # Some names are passed through a variable (e.g. the starter's per-orchestrator events): every
    # listed name must at least be a string in the app, and every name logged directly must be listed.
    assert listed - string_constants(trees) == set(), "listed in docs/observability.md but nowhere in the app"
    assert emitted - listed == set(), "emitted by the app but not listed in docs/observability.md"
    through = event_names_through_variables(trees)
    assert len(through - emitted) >= 10, "found too few event names passed through a variable"
    assert through - listed == set(), "emitted through a variable but not listed in docs/observability.md"


def test_the_event_catalogue_has_one_row_per_event():
    """An operator who searches the page for an event finds one row: the same name in two areas' tables would
    say two things of it."""
    rows = event_catalogue()
    assert len({row.area for row in rows}) >= 10, "found too few areas in docs/observability.md's catalogue"
    counted = Counter(row.event for row in rows)
    assert {name: n for name, n in counted.items() if n > 1} == {}, "events with more than one row"


def test_the_event_catalogue_reads_a_row_per_event():
    table = f"{CATALOGUE_HEADER}\n|---|---|---|---|\n"
    text = f"intro\n\n### one\n\n{table}| `A` | INFO | | a |\n\n### two\n\n{table}| `B` | WARNING, ERROR | `r` | b |\n"
    assert catalogue_rows(text) == [
        CatalogueRow("one", "A", "INFO", ""),
        CatalogueRow("two", "B", "WARNING, ERROR", "`r`"),
    ]
    for broken in (f"### one\n\n{table}| `A`, `B` | INFO | | a |\n", f"### one\n\n{table}| `A` | INFO | a |\n"):
        with pytest.raises(AssertionError):
            catalogue_rows(broken)
    assert LEVEL_CELL.fullmatch("WARNING, ERROR") and LEVEL_CELL.fullmatch("INFO")
    for cell in ("", "Warning", "WARNING or ERROR", "WARNING,ERROR", "WARNING (ERROR when...)"):
        assert not LEVEL_CELL.fullmatch(cell), cell


# `Name` (WARNING..., `Name`, ERROR..., `Name` events (ERROR...: a level the docs give an event
DOCUMENTED_LEVEL = re.compile(rf"`([A-Z]\w+)`(?:, | \(| events \()({'|'.join(LEVELS)})\b")


def logged_levels(trees: list[ast.Module]) -> dict[str, set[str]]:
    """The levels each event name is logged at where the name is written out: ``app_event("<name>", message,
    level)`` (INFO unless given; a level chosen at run time counts each level it names) and
    ``log.<level>(..., extra={"event": "<name>"})``. A level held in a variable is ``"?"``."""
    found: dict[str, set[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if called == "app_event" and node.args and isinstance(node.args[0], ast.Constant):
                given = [k.value for k in node.keywords if k.arg == "level"] + node.args[2:3]
                named = set(re.findall(rf"\b({'|'.join(LEVELS)})\b", ast.unparse(given[0]))) if given else {"INFO"}
                found.setdefault(str(node.args[0].value), set()).update(named or {"?"})
            elif called in ("debug", "info", "warning", "error", "exception", "critical"):
                for extra in (k.value for k in node.keywords if k.arg == "extra" and isinstance(k.value, ast.Dict)):
                    for key, value in zip(extra.keys, extra.values, strict=True):
                        if isinstance(key, ast.Constant) and key.value == "event" and isinstance(value, ast.Constant):
                            level = "ERROR" if called == "exception" else called.upper()
                            found.setdefault(str(value.value), set()).add(level)
    return found


def test_the_level_the_docs_give_an_event_is_one_the_app_logs_it_at():
    """A page that says an event is a WARNING or an ERROR (``StoreAccessRefused``, WARNING) is where an operator
    learns what to filter a log query by: the app logs the event at that level."""
    levels = logged_levels(app_trees())
    checked, wrong = 0, []
    for page in markdown_pages():
        for name, level in DOCUMENTED_LEVEL.findall(page.read_text(encoding="utf-8")):
            checked += 1
            logged = levels.get(name, set())
            if level not in logged and "?" not in logged:
                wrong.append(f"{page.relative_to(ROOT)}: {name} documented {level}, logged {sorted(logged)}")
    assert checked > 10, "found too few documented event levels"
    assert wrong == []


def test_the_documented_level_pattern_reads_the_three_forms():
    text = "(`StoreAccessRefused`, WARNING) `DeadLetterFound` (WARNING: x) the `OperatorAlert` events (ERROR)"
    assert DOCUMENTED_LEVEL.findall(text) == [
        ("StoreAccessRefused", "WARNING"),
        ("DeadLetterFound", "WARNING"),
        ("OperatorAlert", "ERROR"),
    ]


ALERTS_BICEP = read("infra/modules/alerts.bicep")


def alert_rule_queries() -> dict[str, str]:
    """Each ``scheduledQueryRules`` resource of ``infra/modules/alerts.bicep`` by its symbol, with its query."""
    starts = list(re.finditer(r"^resource (\w+) '([^'@]+)@", ALERTS_BICEP, flags=re.MULTILINE))
    rules = {}
    for at, start in enumerate(starts):
        if start.group(2) != "Microsoft.Insights/scheduledQueryRules":
            continue
        body = ALERTS_BICEP[start.end() : starts[at + 1].start() if at + 1 < len(starts) else None]
        rules[start.group(1)] = " ".join(re.findall(r"query: '(.*)'", body))
    return rules


def log_alert_rules() -> dict[str, set[str]]:
    """Each log alert rule by its symbol, with the strings its query compares with (the event names it pages on
    among them)."""
    return {name: set(re.findall(r'"(\w+)"', query)) for name, query in alert_rule_queries().items()}


# what a rule's query compares the event dimension with: `== "<name>"` or `in ("<name>", ...)`
EVENT_COMPARED = re.compile(r'tostring\(Properties\.event\) (?:== "(\w+)"|in \(([^)]*)\))')


def paged_events() -> dict[str, set[str]]:
    """Each log alert rule by its symbol, with the event names its query selects records by."""
    return {
        name: {event for one, many in EVENT_COMPARED.findall(query) for event in re.findall(r"\w+", one or many)}
        for name, query in alert_rule_queries().items()
    }


def test_the_alert_rules_table_is_the_rules_the_bicep_declares():
    """docs/observability.md's alert rules table names every log alert rule and the events each pages on, and
    docs/deploy.md counts them as the Bicep has them."""
    rules = log_alert_rules()
    assert len(rules) >= 5, "found too few log alert rules in infra/modules/alerts.bicep"
    table = section(read("docs/observability.md"), "Events (`observability/`)").split("| rule | pages on |", 1)[1]
    rows = {row[0].strip("`"): row[1] for row in table_rows(table.split("\n\n", 1)[0])}
    assert set(rows) == set(rules), "docs/observability.md's alert rules table and the Bicep's rules differ"
    events = emitted_event_names(app_trees())
    for name, compared in rules.items():
        paged_on = compared & events
        assert paged_on, f"{name}: its query names no event the app emits"
        missing = paged_on - set(re.findall(r"`(\w+)`", rows[name]))
        assert missing == set(), f"{name} pages on events its row does not name"
    counted = re.search(r"(\d+) log search alert rules", read("docs/deploy.md"))
    assert counted and int(counted.group(1)) == len(rules), "docs/deploy.md's count of the log alert rules"


def test_the_level_column_is_the_levels_the_app_logs_each_event_at():
    """The catalogue's level column is what an operator filters a log query by: a level the app logs the event at,
    and every one of them (its row says when each), where the code writes the level out; a level chosen through a
    variable is only checked to be a level."""
    levels = logged_levels(app_trees())
    wrong = []
    for row in event_catalogue():
        if not LEVEL_CELL.fullmatch(row.level):
            wrong.append(f"{row.event}: level {row.level!r} is not one of {LEVELS}, or several joined by ', '")
            continue
        logged = levels.get(row.event, set())
        if logged and "?" not in logged and set(row.level.split(", ")) != logged:
            wrong.append(f"{row.event}: documented {row.level}, logged {sorted(logged)}")
    assert wrong == []


def test_the_pages_column_names_the_rules_that_page_on_each_event():
    """An event's pages column names exactly the log alert rules whose query pages on it (the Bicep's)."""
    rules = paged_events()
    assert all(rules.values()), "a log alert rule whose query names no event"
    rows = event_catalogue()
    wrong = []
    for row in rows:
        paging = {name for name, events in rules.items() if row.event in events}
        named = set(re.findall(r"`(\w+)`", row.pages)) & set(rules)
        if named != paging:
            wrong.append(f"{row.event}: its pages column names {sorted(named)}, the rules on it {sorted(paging)}")
    assert sum(1 for row in rows if row.pages) >= len(rules), "too few events marked as paging"
    assert wrong == []


# Links and references


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def test_every_relative_link_resolves_inside_the_repository():
    broken = []
    for page in markdown_pages():
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        targets = [t for t in LINK.findall(text) if t]
        for target in targets:
            resolved = (page.parent / target).resolve()
            if not resolved.exists() or not resolved.is_relative_to(ROOT):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_every_anchor_of_a_link_between_pages_exists():
    def anchors(page: Path) -> set[str]:
        headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), flags=re.MULTILINE)
        # GitHub's slugs: lower case, punctuation but hyphens and underscores dropped, spaces to hyphens
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}

    missing = []
    for page in markdown_pages():
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target, anchor in re.findall(r"\]\(((?!https?://)[^)#\s]*)#([^)\s]+)\)", text):
            linked = (page.parent / target).resolve() if target else page
            if linked.suffix == ".md" and anchor not in anchors(linked):
                missing.append(f"{page.relative_to(ROOT)}: {target}#{anchor}")
    assert missing == []


TEXT_SUFFIXES = {".py", ".md", ".json", ".bicep", ".yaml", ".yml", ".sh", ".cjs", ".toml", ".ps1"}
OUTSIDE = re.compile(r"\.\./shared|(?<![\w/])DESIGN\.md|/work/|ROOT\.parent\b")
# Files that still refer outside the repository, each with why. The infra tests read the azd and
# host.json JSON schemas from ../shared/schemas, whose keeper asks that they are not copied into the
# project (see the report on issue 16); until that is settled these two name it. An entry must still
# match (a fixed file must leave this list).
KNOWN_OUTSIDE = {
    "tests/infra/paths.py": "the shared JSON schemas (../shared/schemas), skipped where absent",
    "docs/deploy.md": "says where the schema check reads the shared JSON schemas",
}


def tracked_text_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [n for n in listed.decode("utf-8").split("\0") if n]
    return [n for n in names if Path(n).suffix in TEXT_SUFFIXES and not n.startswith("node_modules/")]


# A name in code font: snake_case with an underscore (`update_once_or_reread`, `agent_request`) or CamelCase of two
# words or more (`StateTransition`, `CompensationRetryScheduled`), not part of a path or a dotted name's tail.
CODE_NAME = re.compile(r"(?<![\w/.-])(?:[a-z_][a-z0-9]*(?:_[a-z0-9]+)+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)\b")
# Names the docs show that are no word of the repository, each with why. An entry must still be shown somewhere.
NAMED_ELSEWHERE = {
    # the Functions host, the Python worker, the Azure Monitor distro and exporter (docs/observability.md, Sources)
    **dict.fromkeys(
        (
            "AddFilter",
            "AsyncLoggingHandler",
            "GrpcWorkerChannel",
            "LoggingHandler",
            "OpenTelemetryConfigurationExtensions",
            "OpenTelemetryLoggerProvider",
            "RpcLog",
            "ScriptHost",
            "WorkerApplicationInsightsLoggingEnabled",
            "WorkerTraceFilterTelemetryProcessor",
            "_get_authentication_credential",
            "_get_configurations",
            "function_environment_reload_request",
            "initialize_azure_monitor",
            "on_logging",
        ),
        "the host's, the worker's or the telemetry packages' own names",
    ),
    "paths_to_application_insights": "the telemetry probe's output on an earlier main (docs/observability.md)",
    **dict.fromkeys(
        ("BackoffRate", "FailureRatio", "SamplingDuration", "MinimumThroughput"), "Polly's options (docs/supervisor.md)"
    ),
    "retry_total": "an azure-servicebus client option the app leaves at its default",
    "RollingUpdate": "a Flex Consumption site update strategy the Bicep does not choose",
    "AzureWebJobs": "the host's prefix of the `AzureWebJobs.<function>.Disabled` settings",
    **dict.fromkeys(("agent_payment", "agent_shipping"), "function names order_agents/blueprint.py builds"),
    **dict.fromkeys(("process_order_v5", "compensate_order_v2"), "the names a new version would have had"),
    **dict.fromkeys(("NonRunningStates", "ServerBusy"), "the Durable extension's and Service Bus's own names"),
    **dict.fromkeys(("ru_maxrss", "VmHWM"), "the operating system's memory figures (docs/benchmark.md)"),
    "pytest_sessionfinish": "pytest's hook",
}


def repository_words(*, with_tests: bool) -> set[str]:
    """Every word of a tracked file's path, and of the text of every tracked file but Markdown (and the tests')."""
    words: set[str] = set()
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in (n for n in listed.decode("utf-8").split("\0") if n and not n.startswith("node_modules/")):
        words.update(re.findall(r"\w+", name))
        path = ROOT / name
        if path.suffix != ".md" and (with_tests or not name.startswith("tests/")) and path.is_file():
            words.update(re.findall(r"\w+", path.read_text(encoding="utf-8", errors="replace")))
    return words


def test_every_name_the_docs_show_in_code_font_is_a_name_in_the_repository():
    """A function, event, history entry or setting the docs name in code font exists: a rename leaves no page
    naming the old one. The pages that describe the app are read against the app's files, so a name only a test
    still mentions does not pass; docs/testing.md and docs/benchmark.md, which name tests and fixtures, against
    the tests too."""
    app_words, all_words = repository_words(with_tests=False), repository_words(with_tests=True)
    unknown, shown = [], set()
    for page in markdown_pages():
        words = all_words if page.name in ("testing.md", "benchmark.md") else app_words
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for span in re.findall(r"`([^`]+)`", line):
                for name in CODE_NAME.findall(span):
                    if name in NAMED_ELSEWHERE:
                        shown.add(name)
                    elif name not in words:
                        unknown.append(f"{page.relative_to(ROOT)}:{number}: {name}")
    assert len(app_words) > 1000, "read too few words of the repository"
    assert unknown == []
    assert set(NAMED_ELSEWHERE) <= shown, "a name in NAMED_ELSEWHERE no page shows any more: drop it"


def test_the_code_name_pattern_takes_names_and_leaves_paths():
    span = "update_once_or_reread StateTransition tests/test_docs.py docs.design_notes Error a_b"
    assert CODE_NAME.findall(span) == ["update_once_or_reread", "StateTransition", "a_b"]


def test_no_tracked_file_refers_to_a_path_outside_the_repository():
    files = tracked_text_files()
    assert "tests/test_docs.py" in files and "README.md" in files
    hits: dict[str, list[str]] = {}
    for name in files:
        if name == "tests/test_docs.py" or not (ROOT / name).is_file():
            continue
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        found = [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
        if found:
            hits[name] = found
    unexpected = {name: lines for name, lines in hits.items() if name not in KNOWN_OUTSIDE}
    assert unexpected == {}
    assert set(KNOWN_OUTSIDE) <= set(hits), "a file in KNOWN_OUTSIDE no longer refers outside: drop it"


def test_the_outside_reference_pattern_catches_what_it_should():
    for line in ('SCHEMAS = ROOT.parent / "shared"', "see ../shared/schemas", "From `DESIGN.md`:", "/work/shared/x"):
        assert OUTSIDE.search(line), line
    for line in ("docs/design.md", "[design](design.md)", "Path(__file__).parents[2]"):
        assert not OUTSIDE.search(line), line
