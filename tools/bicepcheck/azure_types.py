"""Resource bodies checked against Azure's published Bicep type definitions, offline.

The types come from the ``azmcp`` binary of npm ``@azure/mcp`` (pinned in package.json; see
``dotnet_bundle``). For every resource declaration the checker resolves ``type@apiVersion`` in the
type index and walks the literal parts of the body: unknown property names, read-only properties
set, required properties missing, literals of the wrong kind, values outside an enum or a range.
Conditionals (``c ? a : b``) are checked branch by branch; other expressions (references, calls)
are not evaluated: their properties are skipped.

Some providers are indexed but their ``types.json`` is not shipped in the binary (``azmcp
bicepschema get`` fails on them too): those types are returned as gaps, not findings, so the caller
can list them explicitly (``rules.TYPE_LIBRARY_GAPS``).
"""

from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from tools.bicepcheck.dotnet_bundle import TYPES_ASSEMBLY, bundled_file, inflate, manifest_resources
from tools.bicepcheck.query import Alternatives, Expression, Resource

# Bicep type flags (Azure/bicep-types: TypePropertyFlags).
REQUIRED, READ_ONLY = 1, 2
# Keys of a resource declaration body that are Bicep syntax, not resource properties.
BICEP_KEYWORDS = frozenset({"parent", "scope", "dependsOn"})


def azmcp_binary(root: Path) -> Path | None:
    """``AZMCP_BINARY``, or the platform package npm installed beside ``@azure/mcp``."""
    override = os.environ.get("AZMCP_BINARY")
    if override:
        return Path(override)
    system = {"Linux": "linux", "Darwin": "darwin", "Windows": "win32"}.get(platform.system(), "")
    machine = {"x86_64": "x64", "AMD64": "x64", "arm64": "arm64", "aarch64": "arm64"}.get(platform.machine(), "")
    dist = root / "node_modules" / "@azure" / f"mcp-{system}-{machine}" / "dist"
    for name in ("azmcp", "azmcp.exe"):
        if (dist / name).is_file():
            return dist / name
    return None


@dataclass(frozen=True)
class SchemaFinding:
    resource: str  # symbol
    line: int
    path: str  # property path, e.g. properties.siteConfig.ftpsState
    message: str

    def __str__(self) -> str:
        return (
            f"{self.line}: {self.resource}.{self.path}: {self.message}" if self.path else f"{self.line}: {self.message}"
        )


class TypeLibrary:
    """The type index and the ``types.json`` files of one ``azmcp`` binary (read once)."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self._dll = bundled_file(binary, TYPES_ASSEMBLY)
        self._resources = manifest_resources(self._dll)
        self._files: dict[str, list[dict[str, Any]]] = {}

    @cached_property
    def _index(self) -> dict[str, str]:
        """Lower-cased ``type@version`` -> ``path#/n`` reference."""
        index = json.loads(inflate(self._dll, self._resources["index.json.deflated"]))
        return {key.lower(): value["$ref"] for key, value in index["resources"].items()}

    def versions(self, type_name: str) -> list[str]:
        prefix = type_name.lower() + "@"
        return sorted(key.split("@", 1)[1] for key in self._index if key.startswith(prefix))

    def is_indexed(self, type_at_version: str) -> bool:
        return type_at_version.lower() in self._index

    def is_shipped(self, type_at_version: str) -> bool:
        """Indexed and its types.json is inside the binary."""
        ref = self._index.get(type_at_version.lower())
        return ref is not None and ref.split("#", 1)[0] + ".deflated" in self._resources

    def resource_type(self, type_at_version: str) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        """(types of its file, the ResourceType entry), or None when unknown or not shipped."""
        ref = self._index.get(type_at_version.lower())
        if ref is None or not self.is_shipped(type_at_version):
            return None
        path, pointer = ref.split("#/", 1)
        if path not in self._files:
            self._files[path] = json.loads(inflate(self._dll, self._resources[path + ".deflated"]))
        types = self._files[path]
        return types, types[int(pointer)]


def _deref(types: list[dict[str, Any]], ref: dict[str, Any]) -> dict[str, Any]:
    return types[int(ref["$ref"].removeprefix("#/"))]


class _Walker:
    def __init__(self, types: list[dict[str, Any]], resource: Resource, resolve: Any) -> None:
        self.types = types
        self.resource = resource
        self.resolve = resolve
        self.findings: list[SchemaFinding] = []

    def report(self, path: str, message: str) -> None:
        self.findings.append(SchemaFinding(self.resource.symbol, self.resource.line, path, message))

    def check(self, type_: dict[str, Any], value: Any, path: str, top: bool = False) -> None:
        value = self.resolve(value)
        if isinstance(value, Alternatives):  # c ? a : b: each branch must fit
            for branch in value.values:
                self.check(type_, branch, path, top)
            return
        if isinstance(value, Expression) or value is None:  # null: "not set", as Bicep allows
            return
        kind = type_["$type"]
        if kind == "AnyType":
            return
        if kind == "ObjectType":
            self._object(type_, value, path, top)
        elif kind == "DiscriminatedObjectType":
            self._discriminated(type_, value, path, top)
        elif kind == "ArrayType":
            if not isinstance(value, list):
                self.report(path, f"expected an array, found {_kind(value)}")
                return
            for i, item in enumerate(value):
                self.check(_deref(self.types, type_["itemType"]), item, f"{path}[{i}]")
        elif kind == "UnionType":
            self._union(type_, value, path)
        else:
            problem = self.scalar_problem(type_, value)
            if problem:
                self.report(path, problem)

    def scalar_problem(self, type_: dict[str, Any], value: Any) -> str | None:
        kind = type_["$type"]
        if kind == "StringType":
            if not isinstance(value, str):
                return f"expected a string, found {_kind(value)}"
            if "minLength" in type_ and len(value) < type_["minLength"]:
                return f"{value!r} is shorter than {type_['minLength']}"
            if "maxLength" in type_ and len(value) > type_["maxLength"]:
                return f"{value!r} is longer than {type_['maxLength']}"
            if "pattern" in type_ and not re.search(type_["pattern"], value):
                return f"{value!r} does not match {type_['pattern']}"
        elif kind == "StringLiteralType":
            if value != type_["value"]:
                return f"expected {type_['value']!r}, found {value!r}"
        elif kind == "IntegerType":
            if not isinstance(value, int) or isinstance(value, bool):
                return f"expected an integer, found {_kind(value)}"
            if "minValue" in type_ and value < type_["minValue"]:
                return f"{value} is below the minimum {type_['minValue']}"
            if "maxValue" in type_ and value > type_["maxValue"]:
                return f"{value} is above the maximum {type_['maxValue']}"
        elif kind == "BooleanType" and not isinstance(value, bool):
            return f"expected a boolean, found {_kind(value)}"
        return None

    def _union(self, type_: dict[str, Any], value: Any, path: str) -> None:
        members = [_deref(self.types, ref) for ref in type_["elements"]]
        literals = [m["value"] for m in members if m["$type"] == "StringLiteralType"]
        open_string = any(m["$type"] == "StringType" for m in members)
        if isinstance(value, str) and literals and not open_string:
            if value not in literals:
                self.report(path, f"{value!r} is not one of {sorted(literals)}")
            return
        for member in members:
            trial = _Walker(self.types, self.resource, self.resolve)
            trial.check(member, value, path)
            if not trial.findings:
                return
        self.report(path, f"{_kind(value)} {value!r} matches no member of the union")

    def _object(
        self, type_: dict[str, Any], value: Any, path: str, top: bool, extra: dict[str, Any] | None = None
    ) -> None:
        if not isinstance(value, dict):
            self.report(path, f"expected an object, found {_kind(value)}")
            return
        properties: dict[str, Any] = {**(extra or {}), **type_.get("properties", {})}
        additional = type_.get("additionalProperties")
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if top and key in BICEP_KEYWORDS:
                continue
            spec = properties.get(key)
            if spec is None:
                if additional is not None:
                    self.check(_deref(self.types, additional), item, where)
                    continue
                near = [name for name in properties if name.lower() == key.lower()]
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                self.report(where, f"unknown property{hint}")
                continue
            flags = spec.get("flags", 0)
            if flags & READ_ONLY and not flags & REQUIRED:
                self.report(where, "read-only property cannot be set")
                continue
            self.check(_deref(self.types, spec["type"]), item, where)
        if top and self.resource.existing:
            return
        for name, spec in properties.items():
            if spec.get("flags", 0) & REQUIRED and not spec.get("flags", 0) & READ_ONLY and name not in value:
                self.report(f"{path}.{name}" if path else name, "required property missing")

    def _discriminated(self, type_: dict[str, Any], value: Any, path: str, top: bool) -> None:
        if not isinstance(value, dict):
            self.report(path, f"expected an object, found {_kind(value)}")
            return
        tag = self.resolve(value.get(type_["discriminator"]))
        if not isinstance(tag, str):
            return  # decided at deploy time
        element = type_["elements"].get(tag)
        if element is None:
            self.report(path or type_["discriminator"], f"{tag!r} is not one of {sorted(type_['elements'])}")
            return
        self._object(_deref(self.types, element), value, path, top, extra=type_.get("baseProperties", {}))


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "an integer", list: "an array", dict: "an object"}.get(type(value), "null")


def check_resource(library: TypeLibrary, resource: Resource, resolve: Any) -> list[SchemaFinding]:
    """Findings for one resource declaration; [] when its type is not shipped (a gap)."""
    if not library.is_indexed(resource.type):
        known = library.versions(resource.type_name)
        detail = f"; known versions: {', '.join(known[-5:])}" if known else "; no such resource type"
        return [SchemaFinding(resource.symbol, resource.line, "", f"{resource.type} is not in the type index{detail}")]
    found = library.resource_type(resource.type)
    if found is None:
        return []
    types, entry = found
    walker = _Walker(types, resource, resolve)
    walker.check(_deref(types, entry["body"]), resource.body, "", top=True)
    return walker.findings
