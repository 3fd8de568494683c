"""The function index as the Functions host sees it: ``python -m tests.infra.function_index``
imports function_app in a fresh interpreter, calls ``app.get_functions()`` once (the SDK refuses
a second call on the same app), and prints each function's name, bindings and parameters as JSON."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

from tests.infra.paths import ROOT


def user_function(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """The function the developer wrote: durable-client functions are wrapped by the SDK, which
    keeps the original as ``client_function`` (and ``__wrapped__``)."""
    original: Callable[..., Any] = (
        getattr(wrapper, "client_function", None) or getattr(wrapper, "__wrapped__", None) or wrapper
    )
    return original


def annotation_name(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))


def describe() -> list[dict[str, Any]]:
    import function_app

    described = []
    for function in function_app.app.get_functions():
        parameters = inspect.signature(user_function(function.get_user_function())).parameters
        described.append(
            {
                "name": function.get_function_name(),
                "bindings": [
                    {
                        key: str(value) if not isinstance(value, bool | int) else value
                        for key, value in b.get_dict_repr().items()
                    }
                    for b in function.get_bindings()
                ],
                "parameters": {name: annotation_name(p.annotation) for name, p in parameters.items()},
            }
        )
    return described


@cache
def function_index() -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.infra.function_index"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"the function index did not load:\n{result.stderr[-4000:]}"
    index: list[dict[str, Any]] = json.loads(result.stdout.strip().splitlines()[-1])
    return index


if __name__ == "__main__":
    print(json.dumps(describe()))
