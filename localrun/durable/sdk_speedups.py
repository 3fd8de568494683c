"""Two more speed-ups for the SDK's replay in long simulations, not changes of behaviour (see also
``fast_timestamps``). Every episode replays the whole history, so per-event and per-replay costs add
up: in a 1,000-order run these two were about 5% of the CPU time.

- ``TaskOrchestrationExecutor.__init__`` builds a ``namedtuple`` class on every replay (``namedtuple``
  compiles source code each time). The class only shapes two-field records it keeps to itself, so
  one class per name and fields serves every replay.
- The Durable JSON codec (``df_loads``/``df_dumps``, called for every task result and activity input
  on every replay) reads the ``AZURE_FUNCTIONS_DURABLE_STRICT_TYPING`` environment variable on every
  call. ``frozen_strict_mode`` reads it once for the length of a run.
"""

from __future__ import annotations

import collections
import functools
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_installed = False


@functools.cache
def _namedtuple(typename: str, field_names: tuple[str, ...]) -> type[tuple[Any, ...]]:
    return collections.namedtuple(typename, field_names)


def _shared_namedtuple(typename: str, field_names: Any, **kwargs: Any) -> type[tuple[Any, ...]]:
    if kwargs or isinstance(field_names, str):
        return collections.namedtuple(typename, field_names, **kwargs)
    return _namedtuple(typename, tuple(field_names))


def install() -> None:
    global _installed
    if _installed:
        return
    module = importlib.import_module("azure.durable_functions.models.TaskOrchestrationExecutor")
    setattr(module, "namedtuple", _shared_namedtuple)  # noqa: B010
    _installed = True


@contextmanager
def frozen_strict_mode() -> Iterator[None]:
    """The codec's strict-typing switch, read once now and restored afterwards."""
    codec = importlib.import_module("azure.functions._durable_functions")
    original = getattr(codec, "_is_strict_mode")  # noqa: B009
    strict = bool(original())
    setattr(codec, "_is_strict_mode", lambda: strict)  # noqa: B010
    try:
        yield
    finally:
        setattr(codec, "_is_strict_mode", original)  # noqa: B010
