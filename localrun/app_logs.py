"""``--log-level``: the app's own loggers let their records through at the level asked, for the run only.

The runner's stderr handler sits on the root logger. A record reaches it only if its logger lets it through, and a
logger with no level of its own takes the root's, WARNING unless someone set it. The app's named events go through
``orders``, which the simulation holds at INFO for its recorder, so ``--log-level INFO`` showed them. Every other
``log.info`` of the app (``notifications``, ``status``, ``supervisor`` and each module's ``__name__`` logger: a mark
that could not be read, a status owed, a sweep's give-up) stopped at WARNING and never showed, whatever the option
said (fuzz seed 8437's run, session 65).

So for the run each app logger without a level at or below the one asked gets it, and gets its own back afterwards.
Third-party loggers (the Azure SDKs, gRPC, aiohttp) are left alone: their INFO lines (every HTTP request) would
drown the app's. ``tests/localrun/test_app_logs.py`` holds ``APP_LOGGERS`` to every logger the app's code names."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

# The app's top-level packages and modules (a ``getLogger(__name__)`` logger is a child of one) and the named
# loggers its code uses.
APP_LOGGERS = (
    "activities",
    "adapters",
    "contracts",
    "deferral",
    "dependencies",
    "domain",
    "function_app",
    "notifications",
    "observability",
    "operations",
    "orchestrators",
    "order_agents",
    "orders",
    "retention",
    "settings",
    "status",
    "submission",
    "supervisor",
)


@contextmanager
def app_log_level(level: int | str) -> Iterator[None]:
    """Lowers each of ``APP_LOGGERS`` to ``level`` where its own level is unset or higher; restores them after."""
    wanted = logging.getLevelName(level) if isinstance(level, str) else level
    if not isinstance(wanted, int):
        raise ValueError(f"not a log level: {level!r}")
    changed: list[tuple[logging.Logger, int]] = []
    for name in APP_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET or logger.level > wanted:
            changed.append((logger, logger.level))
            logger.setLevel(wanted)
    try:
        yield
    finally:
        for logger, previous in changed:
            logger.setLevel(previous)
