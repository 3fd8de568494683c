"""The import rules of the production code, checked on its syntax tree (no import is executed).

Layers, lowest first; a unit may import the standard library, the units of its own layer and of
the layers below it, never one above:

0. ``domain``: the rules (states, transitions, retry budget, compensation, payments). It imports
   the standard library and itself, nothing else (no I/O, no SDK, no setting, no pydantic).
1. ``contracts``: the messages on the queues and the names of queues and containers (``domain``,
   ``pydantic``).
2. ``settings``, ``observability``: the typed configuration and the structured events (any
   third-party library, and the layers below).
3. ``adapters``: Cosmos DB, Service Bus, the clock and the remote services behind interfaces.
4. ``dependencies``: the ``AppContext`` every role receives and the production wiring.
5. the roles: ``submission``, ``deferral``, ``orchestrators``, ``activities``, ``order_agents``,
   ``supervisor``, ``notifications``, ``operations``. They may import each other, but the graph of
   top-level units has no cycle.
6. ``function_app``: registers every role's blueprint.

``localrun``, ``tools`` and ``tests`` sit above all of it: no production module imports them.
A new top-level package fails the test until it is given a layer here.

Also checked: no module imports a name starting with ``_`` from another module (``from x import
_y``): what another module needs is public in one place.

Which imports count: every ``import``/``from ... import`` in a module, wherever it stands: at
module level, under ``if TYPE_CHECKING:`` and inside functions (a lazy import is still a
dependency, it only moves the cost). Relative imports are resolved against the importing module.

Two decisions behind the rules:

- the domain's records are frozen standard-library dataclasses (snake_case fields, ``datetime``
  timestamps, changed with ``dataclasses.replace``). Their documents are mapped in
  ``adapters/cosmos/mapping.py`` (camelCase keys, fixed-width UTC timestamp text, enums by value,
  unknown keys ignored, a bad document named by its field); the roles that show a record (the
  operator API's views, activity results, the ``PaymentNotified`` event) use the same mapping. What
  is Cosmos' stays in ``adapters/cosmos``: a record carries an opaque ``version``, which
  ``adapters/cosmos/documents.stored`` fills from the item's ``_etag`` and which no document holds.
  pydantic stays in ``contracts``: the messages are validated with it where they cross a queue.
- ``dependencies`` sits below the roles: it only assembles adapters (the remote services are
  adapters too, ``adapters/remote``), so every role may take an ``AppContext``.

Pairs ``duplicates`` still lists in production code, and why they stay (all alike in shape, not
in logic, unless said):

- ``activities/compensation_steps.py`` ~ ``activities/scheduler_steps.py``: each fenced activity is
  one call of the shared ``write_fenced`` with its own move, label and hand-over status; the same
  lines are that call's arguments.
- ``notifications/status.py``: ``publish_status`` and ``publish_status_or_owe`` share their keyword
  parameters (the second wraps the first and turns a failed send into an owed status).
- ``settings.py``, ``activities/blueprint.py``, ``operations/blueprint.py``, ``contracts/messages.py``:
  one declaration per setting, trigger, route or message, each with its own names and types.
- ``deferral/apply.py``, ``deferral/sweep.py``, ``supervisor/*``, ``orchestrators/*``,
  ``domain/transitions.py``, ``domain/payments.py``, ``adapters/remote/simulators/service.py``: calls
  with the same keyword arguments (alerts, statuses, events, history entries) for different events.
- ``domain/records.py`` ~ ``domain/deferral.py``: field declarations of different records.
- ``contracts/activities.py``: field declarations of different activity inputs and results (issue
  15 folded their hand-written ``to_json`` / ``from_json`` into one converter,
  ``contracts/converter.py``; each type's fields are its JSON).
- ``contracts/converter.py`` ~ ``adapters/cosmos/mapping.py``: the two converters (the activity
  protocol; a record's document) walk type hints alike, with different rules (key order and omission
  markers, numbers as given; unknown keys ignored, enums, ``2.0`` as an integer). The JSON value
  readers they share are one copy, ``domain/jsonvalues.py``; what stays alike is the dispatch on the
  hint and the import of those readers.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The rank of every production unit (a top-level package or module), lowest first.
LAYERS: dict[str, int] = {
    "domain": 0,
    "contracts": 1,
    "settings": 2,
    "observability": 2,
    "adapters": 3,
    "dependencies": 4,
    "submission": 5,
    "deferral": 5,
    "orchestrators": 5,
    "activities": 5,
    "order_agents": 5,
    "supervisor": 5,
    "notifications": 5,
    "operations": 5,
    "retention": 5,
    "function_app": 6,
}
# Not production code: above every layer, imported by none of it.
ABOVE_ALL = frozenset({"localrun", "tools", "tests"})
# Production modules at the top of the repository (dev.py is a developer tool, like tools/).
ROOT_MODULES = ("function_app.py", "dependencies.py", "settings.py")
# The only third-party imports the two lowest layers may make (the domain: none).
LOW_LAYER_THIRD_PARTY: dict[str, frozenset[str]] = {
    "domain": frozenset(),
    "contracts": frozenset({"pydantic"}),
}


@dataclass(frozen=True)
class Import:
    path: Path  # relative to the root
    line: int
    module: str  # absolute dotted name of what is imported from
    names: tuple[str, ...]  # for ``from m import a, b``; empty for ``import m``


def production_files(root: Path) -> Iterator[Path]:
    """Every module of every top-level package that is not in ``ABOVE_ALL``, and the root modules."""
    for entry in sorted(root.iterdir()):
        if entry.is_dir() and (entry / "__init__.py").exists() and entry.name not in ABOVE_ALL:
            yield from sorted(entry.rglob("*.py"))
    for name in ROOT_MODULES:
        if (root / name).exists():
            yield root / name


def unit_of(relative: Path) -> str:
    return relative.parts[0].removesuffix(".py")


def module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(root: Path, path: Path) -> Iterator[Import]:
    relative = path.relative_to(root)
    own = module_name(relative)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(relative, node.lineno, alias.name, ())
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield Import(relative, node.lineno, module, tuple(a.name for a in node.names))


def local_units(root: Path) -> set[str]:
    """Every top-level package or module of the repository (production or not)."""
    units = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in root.glob("*.py")}
    return units


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def check(root: Path, layers: Mapping[str, int] = LAYERS) -> tuple[list[str], dict[str, set[str]]]:
    """The violations of the rules under ``root`` and the graph of production units it found."""
    problems: list[str] = []
    graph: dict[str, set[str]] = {}
    local = local_units(root)
    for path in production_files(root):
        relative = path.relative_to(root)
        unit = unit_of(relative)
        graph.setdefault(unit, set())
        if unit not in layers:
            problems.append(f"{relative}: {unit} has no layer (add it to LAYERS)")
            continue
        own_module = module_name(relative)
        for imp in imports_of(root, path):
            target = imp.module.split(".")[0]
            where = f"{imp.path}:{imp.line}"
            private = [n for n in imp.names if is_private(n)]
            if private and target in local and imp.module != own_module:
                problems.append(f"{where}: imports private {', '.join(private)} from {imp.module}")
            if target == unit:
                continue
            if target in ABOVE_ALL:
                problems.append(f"{where}: {unit} imports {imp.module} (localrun, tools and tests are above all)")
            elif target in local:
                graph[unit].add(target)
                if target not in layers:
                    problems.append(f"{where}: {unit} imports {imp.module}, which has no layer")
                elif layers[target] > layers[unit]:
                    problems.append(
                        f"{where}: {unit} (layer {layers[unit]}) imports {imp.module} (layer {layers[target]})"
                    )
            elif target not in sys.stdlib_module_names and target not in LOW_LAYER_THIRD_PARTY.get(unit, {target}):
                problems.append(f"{where}: {unit} imports the third-party {imp.module}")
    for component, closed in cycles(graph):
        problems.append(f"import cycle among {', '.join(component)}: {' -> '.join(closed)}")
    return problems, graph


def cycles(graph: Mapping[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """Every strongly connected component of more than one unit, with one closed path through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[list[str], list[str]]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append((sorted(component), closed_path(graph, set(component))))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def closed_path(graph: Mapping[str, set[str]], component: set[str]) -> list[str]:
    """A path inside ``component`` from its first unit back to it (breadth-first, so the shortest)."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph.get(node, set()) & component):
                if nxt == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [*reversed(chain), start]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    return sorted(component)


# --- the rules, on the repository ------------------------------------------------------------


def test_production_code_obeys_the_import_rules() -> None:
    problems, graph = check(ROOT)
    assert not problems, "\n".join(problems)
    # the checker saw the code it is meant to guard
    assert {"domain", "contracts", "adapters", "submission", "function_app"} <= set(graph)
    assert graph["function_app"], "function_app imports the roles' blueprints"


# --- the checker, on synthetic trees: it must be able to fail ---------------------------------


def write(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


CLEAN = {
    "domain/__init__.py": "",
    "domain/rules.py": "import datetime\nfrom dataclasses import dataclass\nfrom domain import rules\n",
    "contracts/__init__.py": "",
    "contracts/messages.py": "from pydantic import BaseModel\nfrom domain.rules import dataclass\n",
    "adapters/__init__.py": "",
    "adapters/store.py": "import azure.cosmos\nfrom contracts.messages import BaseModel\n",
    "submission/__init__.py": "",
    "submission/intake.py": "from adapters.store import azure\nfrom . import rules\n",
    "submission/rules.py": "",
    "deferral/__init__.py": "",
    "deferral/apply.py": "from submission.intake import azure\n",
    "function_app.py": "from submission import intake\nfrom deferral import apply\n",
    "localrun/__init__.py": "from submission.intake import azure\n",
}


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    problems, graph = check(write(tmp_path, CLEAN))
    assert problems == []
    assert graph["function_app"] == {"submission", "deferral"}
    assert "localrun" not in graph


def test_the_checker_reports_every_kind_of_violation(tmp_path: Path) -> None:
    broken = {
        **CLEAN,
        # domain reaching up (inside a function: still counted) and into a third-party SDK
        "domain/rules.py": "def f():\n    from contracts import messages\nimport azure.cosmos\n",
        # a private name from another module
        "adapters/store.py": "from domain.rules import _hidden\n",
        # a cycle between two roles, one side only under TYPE_CHECKING
        "submission/intake.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from deferral import apply\n",
        # production importing the local runner
        "deferral/apply.py": "from submission.intake import x\nimport localrun\n",
        # a package nobody gave a layer
        "newthing/__init__.py": "",
    }
    problems, _ = check(write(tmp_path, broken))
    text = "\n".join(problems)
    assert "domain/rules.py:2: domain (layer 0) imports contracts (layer 1)" in text
    assert "domain/rules.py:3: domain imports the third-party azure.cosmos" in text
    assert "adapters/store.py:1: imports private _hidden from domain.rules" in text
    assert "deferral/apply.py:2: deferral imports localrun" in text
    assert "newthing/__init__.py: newthing has no layer" in text
    assert "import cycle among deferral, submission: deferral -> submission -> deferral" in text
    assert "import cycle among contracts, domain: contracts -> domain -> contracts" in text
    assert len(problems) == 7, text


def test_the_domain_may_not_import_pydantic(tmp_path: Path) -> None:
    """Its records are dataclasses; their documents are mapped in adapters/cosmos."""
    tree = {
        **CLEAN,
        "domain/rules.py": "from pydantic import BaseModel\n",
        "domain/late.py": "def f():\n    import pydantic.alias_generators\n",
    }
    problems, _ = check(write(tmp_path, tree))
    assert problems == [
        "domain/late.py:2: domain imports the third-party pydantic.alias_generators",
        "domain/rules.py:1: domain imports the third-party pydantic",
    ]


def test_relative_imports_resolve_to_the_unit_they_name(tmp_path: Path) -> None:
    tree = {**CLEAN, "domain/rules.py": "from ..contracts import messages\nfrom .inner import _x\n"}
    problems, _ = check(write(tmp_path, tree))
    assert any("domain (layer 0) imports contracts" in p for p in problems), problems
    # ``from .inner import _x`` names another module (domain.inner): private across modules
    assert any("imports private _x from domain.inner" in p for p in problems), problems
