"""What the dead-letter watch (``supervisor/dead_letters.py``) reads through: the queues' dead-letter subqueues, the
documents of what it has seen in them, and when this process last watched. Wired by ``dependencies``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adapters.cosmos.dead_letter_store import DeadLetterCursors
    from adapters.servicebus.dead_letters import DeadLetterBrowser


@dataclass
class WatchState:
    """Per process: when the watch last ran (lost on restart: the next run watches at once), the queue a run
    stopped before, its budget spent (the next run starts there), and how many watches in a row failed per queue."""

    last_run: datetime | None = None
    next_queue: int = 0
    failed_in_a_row: dict[str, int] = field(default_factory=dict)
    monotonic: Callable[[], float] = time.monotonic  # what the run's budget is measured on

    def due(self, now: datetime, interval: timedelta) -> bool:
        """Whether ``interval`` has passed since the last run (a clock set back: at once)."""
        return self.last_run is None or not timedelta(0) <= now - self.last_run < interval


@dataclass(frozen=True)
class DeadLetterWatchPorts:
    """The queues' dead-letter subqueues and what the watch has seen in them; and when this process last watched
    (``AppContext.forget_process_memory`` forgets it)."""

    browser: DeadLetterBrowser
    cursors: DeadLetterCursors
    state: WatchState = field(default_factory=WatchState)
