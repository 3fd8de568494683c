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
    parse,
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


class NotEvaluated(ValueError):
    """The expression uses something ``evaluate`` does not model (a resource property, a call...)."""


def evaluate(tree: Tree, value: Any, env: dict[str, Any]) -> Any:
    """The value of a literal or of a simple expression under ``env`` (param name -> value):
    params, literal vars, ``== != && || !``, ``cond ? a : b``, ``empty(x)``, objects and arrays of
    those. Enough to decide what a deployment option switches; a part it does not model (a
    resource property, another call, an interpolated string) stays an Expression."""
    if isinstance(value, Expression):
        root = parse(f"var value = {value.source}\n".encode())
        try:
            return _evaluate(tree, named_children(named_children(root.root_node)[0])[1], env)
        except NotEvaluated:
            return value
    if isinstance(value, dict):
        return {key: evaluate(tree, item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [evaluate(tree, item, env) for item in value]
    return value


def _evaluate(tree: Tree, node: Node, env: dict[str, Any]) -> Any:
    kids = named_children(node)
    kind = node.type
    if kind == "identifier":
        name = text(node)
        if name in env:
            return env[name]
        try:
            return evaluate(tree, variable(tree, name), env)
        except KeyError:
            raise NotEvaluated(name) from None
    if kind == "parenthesized_expression":
        return _evaluate(tree, kids[0], env)
    if kind == "ternary_expression":
        return _evaluate(tree, kids[1] if _evaluate(tree, kids[0], env) else kids[2], env)
    if kind == "unary_expression" and node.children[0].type == "!":
        return not _evaluate(tree, kids[0], env)
    if kind == "binary_expression":
        left, right = (_evaluate(tree, k, env) for k in kids)
        operators = {"==": left == right, "!=": left != right, "&&": left and right, "||": left or right}
        operator = text(node.children[1])
        if operator in operators:
            return operators[operator]
    if kind == "call_expression" and text(kids[0]) == "empty":
        return not _evaluate(tree, named_children(kids[1])[0], env)
    if kind in ("number", "boolean", "null", "array", "object") or (
        kind == "string" and string_value(node) is not None
    ):
        return evaluate(tree, literal(node), env)
    raise NotEvaluated(text(node))


@dataclass(frozen=True)
class Alternatives:
    """The values a conditional (``c ? a : b``) may take, each literal where possible."""

    values: tuple[Any, ...]


def alternatives(tree: Tree, value: Any) -> Any:
    """``value`` with a ``var`` name resolved (one level) and a conditional expression turned into
    Alternatives of its branches, so each branch can be checked; anything else unchanged."""
    value = resolve(tree, value)
    if not isinstance(value, Expression):
        return value
    node = named_children(named_children(parse(f"var value = {value.source}\n".encode()).root_node)[0])[1]
    while node.type == "parenthesized_expression":
        node = named_children(node)[0]
    if node.type != "ternary_expression":
        return value
    _, yes, no = named_children(node)
    branches: list[Any] = []
    for branch in (yes, no):
        found = alternatives(tree, literal(branch))
        branches += found.values if isinstance(found, Alternatives) else [found]
    return Alternatives(tuple(branches))


def call_arguments(value: Any, function: str) -> list[Any] | None:
    """The arguments (literal where possible) of ``<function>(...)`` if ``value`` is that call."""
    if not isinstance(value, Expression):
        return None
    node = named_children(named_children(parse(f"var value = {value.source}\n".encode()).root_node)[0])[1]
    if node.type != "call_expression" or text(named_children(node)[0]) != function:
        return None
    return [literal(argument) for argument in named_children(named_children(node)[1])]
