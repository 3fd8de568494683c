"""Reading values out of Bicep source for consistency tests: literal variables, resources of a
type, their bodies. Only literals are evaluated; anything else is returned as ``Expression``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tree_sitter import Node, Tree

from tools.bicepcheck.syntax import (
    declaration_body,
    line,
    named_children,
    object_properties,
    parse_file,
    string_value,
    text,
)


@dataclass(frozen=True)
class Expression:
    """A value that is not a literal (a reference, a call, an interpolated string...)."""

    source: str


@dataclass(frozen=True)
class Resource:
    symbol: str
    type: str  # e.g. Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview
    line: int
    body: dict[str, Any]  # the declaration body as literal values and Expressions
    loop_over: str | None  # source of the collection a ``[for x in ...]`` resource iterates
    loop_variable: str | None
    condition: str | None  # source of ``if (...)``, if any
    existing: bool = False  # ``resource x '...' existing = {...}``: a reference, not a deployment

    @property
    def type_name(self) -> str:
        return self.type.split("@", 1)[0]


def literal(node: Node) -> Any:
    """Python value of a literal node; objects and arrays recursively; else an Expression."""
    kind = node.type
    if kind == "string":
        value = string_value(node)
        return value if value is not None else Expression(text(node))
    if kind == "number":
        return int(text(node))
    if kind == "boolean":
        return text(node) == "true"
    if kind == "null":
        return None
    if kind == "array":
        return [literal(item) for item in named_children(node) if item.type != "comment"]
    if kind == "object":
        return {key: literal(value) for key, value in object_properties(node).items()}
    return Expression(text(node))


def load(path: Path) -> Tree:
    return parse_file(path)


def variable(tree: Tree, name: str) -> Any:
    """The value of ``var <name> = ...`` (literal where possible)."""
    for decl in named_children(tree.root_node):
        kids = named_children(decl)
        if decl.type == "variable_declaration" and text(kids[0]) == name:
            return literal(kids[1])
    raise KeyError(f"no var {name!r}")


def param_default(tree: Tree, name: str) -> Any:
    for decl in named_children(tree.root_node):
        kids = named_children(decl)
        if decl.type == "parameter_declaration" and text(kids[0]) == name:
            if len(kids) < 3:
                raise KeyError(f"param {name!r} has no default")
            return literal(kids[2])
    raise KeyError(f"no param {name!r}")


def param_decorators(tree: Tree, name: str) -> dict[str, list[Any]]:
    """Decorators of ``param <name>``: decorator name -> its arguments (literal where possible),
    e.g. ``{"allowed": [[2048, 4096]], "minValue": [40]}``."""
    previous: Node | None = None
    for decl in named_children(tree.root_node):
        kids = named_children(decl)
        if decl.type == "parameter_declaration" and text(kids[0]) == name:
            found: dict[str, list[Any]] = {}
            if previous is not None and previous.type == "decorators":
                for decorator in named_children(previous):
                    call = named_children(decorator)[0]
                    if call.type != "call_expression":
                        continue
                    callee, arguments = named_children(call)[0], named_children(call)[-1]
                    found[text(callee)] = [literal(a) for a in named_children(arguments)]
            return found
        previous = decl
    raise KeyError(f"no param {name!r}")


def resources(tree: Tree, type_name: str | None = None) -> list[Resource]:
    """Resource declarations (optionally only of ``type_name``, without the API version)."""
    found: list[Resource] = []
    for decl in named_children(tree.root_node):
        if decl.type != "resource_declaration":
            continue
        kids = named_children(decl)
        resource_type = string_value(kids[1]) or ""
        if type_name is not None and resource_type.split("@", 1)[0] != type_name:
            continue
        loop_over = loop_variable = condition = None
        node = kids[-1]
        while node.type in ("for_statement", "if_statement"):
            parts = named_children(node)
            if node.type == "for_statement":
                loop_variable = text(parts[0])
                loop_over = text(parts[1])
            else:
                condition = text(parts[0])
            node = parts[-1]
        body = declaration_body(decl)
        found.append(
            Resource(
                symbol=text(kids[0]),
                type=resource_type,
                line=line(decl),
                body=literal(body) if body is not None else {},
                loop_over=loop_over,
                loop_variable=loop_variable,
                condition=condition,
                existing=any(child.type == "existing" for child in decl.children),
            )
        )
    return found


def module_params(tree: Tree, symbol: str) -> dict[str, Any]:
    """The ``params`` a module declaration passes (literal where possible)."""
    for decl in named_children(tree.root_node):
        kids = named_children(decl)
        if decl.type == "module_declaration" and text(kids[0]) == symbol:
            body = declaration_body(decl)
            passed = object_properties(body).get("params") if body is not None else None
            return literal(passed) if passed is not None else {}
    raise KeyError(f"no module {symbol!r}")


def resolve(tree: Tree, value: Any) -> Any:
    """``value`` itself, or the literal value of the ``var`` it names (one level)."""
    if isinstance(value, Expression) and value.source.isidentifier():
        try:
            return variable(tree, value.source)
        except KeyError:
            return value
    return value
