"""The app settings infra/modules/functionapp.bicep gives the deployed function app.

The appsettings resource's ``properties`` is an object literal, or ``union({...}, <optional
extras>)`` (extra settings for an optional backend): the settings every deployment gets are the
object literals among the union's arguments."""

from __future__ import annotations

from typing import Any

from tests.infra.paths import MODULES
from tools.bicepcheck.query import Expression, literal, load, resources
from tools.bicepcheck.syntax import named_children, parse


def bicep_app_settings() -> dict[str, Any]:
    config = [
        r
        for r in resources(load(MODULES / "functionapp.bicep"), "Microsoft.Web/sites/config")
        if r.body["name"] == "appsettings"
    ]
    assert len(config) == 1
    properties = config[0].body["properties"]
    if isinstance(properties, Expression):
        statement = named_children(parse(f"var value = {properties.source}\n".encode()).root_node)[0]
        call = named_children(statement)[1]
        assert call.type == "call_expression" and call.text is not None and call.text.startswith(b"union("), (
            properties.source[:80]
        )
        arguments = named_children(named_children(call)[1])
        merged: dict[str, Any] = {}
        for argument in arguments:
            if argument.type == "object":
                merged.update(literal(argument))
        properties = merged
    assert isinstance(properties, dict) and properties
    return properties
