"""The app's registered functions. ``FunctionApp.get_functions()`` may be called only once per app
(a second call fails on "unique function name"), so everything that needs the index shares this."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def registered_functions() -> tuple[Any, ...]:
    import function_app

    return tuple(function_app.app.get_functions())


def by_name() -> dict[str, Any]:
    return {f.get_function_name(): f for f in registered_functions()}
