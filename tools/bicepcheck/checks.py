"""Project checks over parsed Bicep files: what a Bicep compiler would reject, done offline.

Resource bodies are checked against Azure's published Bicep types (``azure_types``, from the
``azmcp`` binary of npm ``@azure/mcp``) and against the explicit rules the types cannot express
(``rules``).

Local modules (``./modules/x.bicep``) are checked completely: the file exists, every passed
parameter is declared, every required parameter (no default) is passed, every referenced output
is declared. Registry modules (``br/...``, ``br:...``, ``ts/...``) cannot be read offline: only
their version pin is checked, not their parameters or outputs.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tools.bicepcheck.azure_types import TypeLibrary, check_resource
from tools.bicepcheck.model import BicepFile, read_bicep
from tools.bicepcheck.query import alternatives, load, resources
from tools.bicepcheck.rules import TYPE_LIBRARY_GAPS, check_rules

REGISTRY_PREFIXES = ("br/", "br:", "ts/", "ts:")
# A registry reference ends in an exact version tag (no floating "latest").
PINNED_VERSION = re.compile(r":\d+\.\d+\.\d+$")


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def is_registry(source: str) -> bool:
    return source.startswith(REGISTRY_PREFIXES)


def check_parse(model: BicepFile) -> list[Finding]:
    message = "syntax error (tree-sitter-bicep could not parse)"
    return [Finding(str(model.path), n, message) for n in model.parse_error_lines]


def check_symbols(model: BicepFile) -> list[Finding]:
    """No duplicate declarations, no reference to an undeclared name, no unused param or var."""
    findings: list[Finding] = []
    path = str(model.path)
    counts = Counter(s.name for s in model.symbols)
    for symbol in model.symbols:
        if counts[symbol.name] > 1:
            findings.append(Finding(path, symbol.line, f"duplicate symbol {symbol.name!r}"))
    output_counts = Counter(o.name for o in model.outputs)
    for output in model.outputs:
        if output_counts[output.name] > 1:
            findings.append(Finding(path, output.line, f"duplicate output {output.name!r}"))
    declared = {s.name for s in model.symbols}
    for ref in model.references:
        if ref.name not in declared:
            findings.append(Finding(path, ref.line, f"undefined symbol {ref.name!r}"))
    used = {r.name for r in model.references}
    for symbol in model.symbols:
        if symbol.kind in ("param", "var") and symbol.name not in used:
            findings.append(Finding(path, symbol.line, f"unused {symbol.kind} {symbol.name!r}"))
    return findings


def check_modules(model: BicepFile, load: dict[Path, BicepFile]) -> list[Finding]:
    """Module references: local contracts in full, registry pins only. ``load`` caches parsed files."""
    findings: list[Finding] = []
    path = str(model.path)
    targets: dict[str, BicepFile | None] = {}
    for use in model.modules:
        if is_registry(use.source):
            if not PINNED_VERSION.search(use.source):
                findings.append(Finding(path, use.line, f"registry module {use.source!r} is not pinned to a version"))
            targets[use.symbol] = None
            continue
        target_path = (model.path.parent / use.source).resolve()
        if not use.source or not target_path.is_file():
            findings.append(Finding(path, use.line, f"module file {use.source!r} not found"))
            targets[use.symbol] = None
            continue
        if target_path not in load:
            load[target_path] = read_bicep(target_path)
        target = load[target_path]
        targets[use.symbol] = target
        declared = target.params
        for name, at in sorted(use.params.items()):
            if name not in declared:
                findings.append(Finding(path, at, f"module {use.symbol!r}: {use.source} declares no param {name!r}"))
        for name, param in sorted(declared.items()):
            if not param.has_default and name not in use.params:
                findings.append(
                    Finding(path, use.line, f"module {use.symbol!r}: param {name!r} of {use.source} is required")
                )
    for ref in model.output_references:
        if ref.module not in targets:
            continue  # `x.outputs` on a resource, or an undefined symbol (reported by check_symbols)
        used = targets[ref.module]
        if used is not None and ref.output not in used.output_names:
            findings.append(Finding(path, ref.line, f"module {ref.module!r} has no output {ref.output!r}"))
    return findings


def check_tree(root: Path) -> list[Finding]:
    """Every check on every ``.bicep`` file under ``root``."""
    findings: list[Finding] = []
    cache: dict[Path, BicepFile] = {}
    files = sorted(root.rglob("*.bicep"))
    if not files:
        return [Finding(str(root), 0, "no .bicep files found")]
    for file in files:
        resolved = file.resolve()
        if resolved not in cache:
            cache[resolved] = read_bicep(resolved)
        model = cache[resolved]
        findings += check_parse(model)
        findings += check_symbols(model)
        findings += check_modules(model, cache)
    return sorted(findings)


def check_schemas(root: Path, library: TypeLibrary) -> tuple[list[Finding], set[str]]:
    """Every resource body against the published types; also the lower-cased types without a
    shipped schema (gaps): those listed in ``rules.TYPE_LIBRARY_GAPS`` (at any API version) and any
    other the library indexes but does not ship, which the caller reports as unlisted."""
    findings: list[Finding] = []
    gaps: set[str] = set()
    for path in sorted(root.rglob("*.bicep")):
        tree = load(path)
        for resource in resources(tree):
            listed_gap = resource.type_name.lower() in TYPE_LIBRARY_GAPS  # any API version
            if listed_gap or (library.is_indexed(resource.type) and not library.is_shipped(resource.type)):
                gaps.add(resource.type_name.lower())
                continue
            for found in check_resource(library, resource, lambda value, tree=tree: alternatives(tree, value)):
                where = f"{resource.symbol}.{found.path}: " if found.path else ""
                findings.append(Finding(str(path), found.line, f"{resource.type}: {where}{found.message}"))
    return sorted(findings), gaps


def check_all_rules(root: Path) -> list[Finding]:
    return sorted(Finding(f.path, f.line, f"[{f.rule}] {f.message}") for f in check_rules(root))
