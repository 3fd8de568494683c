"""What a Bicep file declares and references, read from its tree-sitter syntax tree."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tree_sitter import Node

from tools.bicepcheck.syntax import (
    declaration_body,
    error_lines,
    line,
    named_children,
    object_properties,
    parse_file,
    string_value,
    text,
)

# Declarations that create a symbol other expressions may reference.
SYMBOL_KINDS = {
    "parameter_declaration": "param",
    "variable_declaration": "var",
    "resource_declaration": "resource",
    "module_declaration": "module",
}
# Names that are in scope in every Bicep file without a declaration.
BUILTIN_NAMESPACES = frozenset({"az", "sys"})


@dataclass(frozen=True)
class Symbol:
    name: str
    kind: str  # param | var | resource | module | output
    line: int
    has_default: bool = False


@dataclass(frozen=True)
class Reference:
    name: str
    line: int


@dataclass(frozen=True)
class ModuleUse:
    symbol: str
    source: str
    line: int
    params: dict[str, int]  # passed parameter name -> line


@dataclass(frozen=True)
class OutputReference:
    module: str
    output: str
    line: int


@dataclass
class BicepFile:
    path: Path
    parse_error_lines: list[int] = field(default_factory=list)
    symbols: list[Symbol] = field(default_factory=list)
    outputs: list[Symbol] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    modules: list[ModuleUse] = field(default_factory=list)
    output_references: list[OutputReference] = field(default_factory=list)

    @property
    def params(self) -> dict[str, Symbol]:
        return {s.name: s for s in self.symbols if s.kind == "param"}

    @property
    def output_names(self) -> set[str]:
        return {o.name for o in self.outputs}


def read_bicep(path: Path) -> BicepFile:
    tree = parse_file(path)
    model = BicepFile(path=path, parse_error_lines=error_lines(tree))
    for decl in named_children(tree.root_node):
        _declaration(decl, model)
    return model


def _declaration(decl: Node, model: BicepFile) -> None:
    kids = named_children(decl)
    if decl.type in SYMBOL_KINDS and kids and kids[0].type == "identifier":
        has_default = decl.type == "parameter_declaration" and len(kids) >= 3
        model.symbols.append(Symbol(text(kids[0]), SYMBOL_KINDS[decl.type], line(decl), has_default))
        _collect_references(kids[1:], model, frozenset())
    elif decl.type == "output_declaration" and kids:
        model.outputs.append(Symbol(text(kids[0]), "output", line(decl)))
        _collect_references(kids[1:], model, frozenset())
    else:
        _collect_references(kids, model, frozenset())
    if decl.type == "module_declaration":
        _module_use(decl, model)


def _module_use(decl: Node, model: BicepFile) -> None:
    kids = named_children(decl)
    source = string_value(kids[1]) if len(kids) > 1 else None
    body = declaration_body(decl)
    params: dict[str, int] = {}
    if body is not None:
        passed = object_properties(body).get("params")
        if passed is not None and passed.type == "object":
            params = {key: line(value) for key, value in object_properties(passed).items()}
    model.modules.append(ModuleUse(text(kids[0]), source or "", line(decl), params))


def _loop_names(node: Node) -> set[str]:
    """Names a ``for`` statement or a lambda binds."""
    names: set[str] = set()
    head = named_children(node)[0] if named_children(node) else None
    if head is None:
        return names
    if head.type == "identifier":
        names.add(text(head))
    elif head.type in ("for_loop_parameters", "parenthesized_expression"):
        for part in named_children(head):
            if part.type in ("identifier", "loop_variable", "loop_enumerator"):
                names.add(text(part))
    return names


def _collect_references(nodes: list[Node], model: BicepFile, local: frozenset[str]) -> None:
    for node in nodes:
        _visit(node, model, local)


def _visit(node: Node, model: BicepFile, local: frozenset[str]) -> None:
    kind = node.type
    kids = named_children(node)
    if kind == "identifier":
        name = text(node)
        if name not in local and name not in BUILTIN_NAMESPACES:
            model.references.append(Reference(name, line(node)))
        return
    if kind in ("for_statement", "lambda_expression"):
        bound = local | _loop_names(node)
        _collect_references(kids[1:], model, frozenset(bound))
        return
    if kind == "object_property":
        # The key is a name, not a reference.
        _collect_references(kids[1:], model, local)
        return
    if kind == "call_expression" and kids and kids[0].type == "identifier":
        # A function name (resourceGroup, guid, ...), not a symbol.
        _collect_references(kids[1:], model, local)
        return
    if kind == "member_expression" and len(kids) == 2:
        _output_reference(node, model)
    if kind in ("type", "string_content"):
        return
    _collect_references(kids, model, local)


def _output_reference(node: Node, model: BicepFile) -> None:
    """``<module>.outputs.<name>`` (or ``<module>[i].outputs.<name>``)."""
    inner, prop = named_children(node)
    if prop.type != "property_identifier" or inner.type != "member_expression":
        return
    target, outputs = named_children(inner)
    if outputs.type != "property_identifier" or text(outputs) != "outputs":
        return
    if target.type == "subscript_expression":
        target = named_children(target)[0]
    if target.type == "identifier":
        model.output_references.append(OutputReference(text(target), text(prop), line(node)))
