"""Building an ``AppContext`` from another with some collaborators changed (``AppContext`` is frozen: a test never
swaps a store, sender or setting on a context in use).

``context_with(ctx, states=flaky)`` is ``dataclasses.replace``: a new context whose derived parts (the cached
counts) are built over the new collaborators. When ``ctx`` is the installed context (``app_context`` of
``tests/conftest.py``, which the registered functions read through ``dependencies.get_context()``), the new one
is installed in its place; the ``app_context`` fixture uninstalls whatever is installed at its teardown."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dependencies import AppContext, installed_context, use_context


def context_with(ctx: AppContext, **changes: Any) -> AppContext:
    """``ctx`` with ``changes`` (field name to collaborator), installed in place of ``ctx`` if ``ctx`` was."""
    changed = dataclasses.replace(ctx, **changes)
    if installed_context() is ctx:
        use_context(changed)
    return changed


@contextmanager
def while_using(ctx: AppContext, **changes: Any) -> Iterator[AppContext]:
    """``context_with(ctx, **changes)`` for the ``with`` block only: afterwards ``ctx`` is installed again if it was
    installed before (for a fault that lasts one call, such as a concurrent writer's read at the wrong moment)."""
    was_installed = installed_context() is ctx
    changed = context_with(ctx, **changes)
    try:
        yield changed
    finally:
        if was_installed:
            use_context(ctx)
