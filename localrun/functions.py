"""The app's functions as the Functions runtime indexed them (``localrun.worker``): the one place
every part of the runner and the tests get them from. The runtime indexes an app once per process,
as the worker does (a second ``app.get_functions()`` fails on "unique function name")."""

from __future__ import annotations

from localrun.worker.process import FunctionsWorker, IndexedFunction


def by_name() -> dict[str, IndexedFunction]:
    return FunctionsWorker.get().functions
