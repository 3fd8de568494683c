"""Parsing Bicep with tree-sitter-bicep, and small helpers over its syntax tree."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

import tree_sitter_bicep
from tree_sitter import Language, Node, Parser, Tree


@cache
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bicep.language()))


def parse(source: bytes) -> Tree:
    return _parser().parse(source)


def parse_file(path: Path) -> Tree:
    return parse(path.read_bytes())


def text(node: Node) -> str:
    return (node.text or b"").decode()


def line(node: Node) -> int:
    """1-based line number of a node."""
    return node.start_point[0] + 1


def named_children(node: Node) -> list[Node]:
    return [c for c in node.children if c.is_named]


def walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children:
        yield from walk(child)


def error_lines(tree: Tree) -> list[int]:
    """Lines of ERROR and MISSING nodes: where the grammar could not read the file."""
    return sorted({line(n) for n in walk(tree.root_node) if n.type == "ERROR" or n.is_missing})


def string_value(node: Node) -> str | None:
    """The value of a string literal without interpolation, else None."""
    if node.type != "string":
        return None
    parts = named_children(node)
    if any(p.type not in {"string_content", "escape_sequence"} for p in parts):
        return None
    return "".join(text(p) for p in parts)


def property_key(prop: Node) -> str:
    """Key of an ``object_property`` (identifier or quoted string)."""
    key = named_children(prop)[0]
    if key.type == "string":
        value = string_value(key)
        return value if value is not None else text(key)
    return text(key)


def object_properties(obj: Node) -> dict[str, Node]:
    """Key to value node of an ``object`` literal."""
    result: dict[str, Node] = {}
    if obj.type != "object":
        return result
    for prop in named_children(obj):
        if prop.type == "object_property":
            parts = named_children(prop)
            if len(parts) >= 2:
                result[property_key(prop)] = parts[-1]
    return result


def declaration_body(decl: Node) -> Node | None:
    """The object body of a resource or module declaration, through ``if (...)`` and ``[for ...]``."""
    node: Node | None = named_children(decl)[-1] if named_children(decl) else None
    while node is not None and node.type != "object":
        if node.type in ("if_statement", "for_statement", "array"):
            kids = named_children(node)
            node = kids[-1] if kids else None
        else:
            return None
    return node
