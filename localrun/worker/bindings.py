"""Binding expressions, resolved as the Functions host resolves them: ``%NAME%`` reads the app setting
``NAME`` and nothing else (no code default). A binding whose expression does not resolve, or a Service
Bus trigger whose connection is not configured, puts its function in error: the host logs it and
runs the other functions (``The 'x' function is in error: ...``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_EXPRESSION = re.compile(r"%([^%]+)%")

# The binding types the runner's host provides. A function with any other binding (a Blob input, a
# Service Bus output binding, ...) would get nothing here while Azure would serve it: it is in error.
EMULATED_BINDINGS = frozenset(
    {
        "serviceBusTrigger",
        "timerTrigger",
        "activityTrigger",
        "orchestrationTrigger",
        "durableClient",
        "httpTrigger",
        "http",  # an HTTP trigger's $return
    }
)


class BindingError(ValueError):
    """The host cannot start this function's binding with the app settings it was given."""


def resolve(value: str, app_settings: Mapping[str, str]) -> str:
    def setting(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in app_settings:
            raise BindingError(f"'%{name}%' does not resolve to a value (no app setting named {name})")
        return app_settings[name]

    return _EXPRESSION.sub(setting, value)


def resolve_binding(binding: Mapping[str, Any], app_settings: Mapping[str, str]) -> dict[str, Any]:
    """The binding with every ``%NAME%`` in its string values replaced by the app setting's value."""
    if binding["type"] not in EMULATED_BINDINGS:
        raise BindingError(
            f"the local runner does not emulate '{binding['type']}' bindings (it provides: "
            f"{', '.join(sorted(EMULATED_BINDINGS))})"
        )
    resolved = {
        key: resolve(value, app_settings) if isinstance(value, str) else value for key, value in binding.items()
    }
    connection = resolved.get("connection")
    # An identity-based connection is a group of settings sharing the prefix (``X__fullyQualifiedNamespace``).
    configured = connection in app_settings or f"{connection}__fullyQualifiedNamespace" in app_settings
    if resolved["type"].startswith("serviceBus") and isinstance(connection, str) and not configured:
        raise BindingError(
            f"Service Bus connection '{connection}' is not configured: set the app setting {connection} "
            f"(a connection string) or {connection}__fullyQualifiedNamespace (identity-based)"
        )
    return resolved
