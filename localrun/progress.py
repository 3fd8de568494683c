"""The runner's progress line on stderr: a bar redrawn in place (``\\r``) on a terminal; elsewhere (a CI
log, a file, a pipe) a whole line at each tenth of the orders settled, since a log keeps every ``\\r``
redraw and shows hundreds of them run together as one line."""

from __future__ import annotations

from datetime import timedelta
from typing import TextIO

WIDTH = 30
STEPS = 10  # lines a run writes when stderr is no terminal, besides its last


class ProgressLine:
    def __init__(self, stream: TextIO, total: int) -> None:
        self._stream = stream
        self._total = total
        self._in_place = stream.isatty()
        self._step = -1
        self._last = ""  # the last line written off a terminal

    def show(self, done: int, simulated: timedelta) -> None:
        """Shows ``done`` of the run's orders settled; off a terminal only when a new tenth is reached."""
        text = self._text(done, simulated)
        if self._in_place:
            self._stream.write(f"\r{text}")
        else:
            step = STEPS * done // max(self._total, 1)
            if step == self._step:
                return
            self._step = step
            self._last = text
            self._stream.write(f"{text}\n")
        self._stream.flush()

    def end(self, done: int, simulated: timedelta) -> None:
        """The run's last figures (off a terminal, unless the line just written says the same), the line ended."""
        text = self._text(done, simulated)
        if self._in_place:
            self._stream.write(f"\r{text}\n")
        elif text != self._last:  # not the line just written again
            self._stream.write(f"{text}\n")
        self._stream.flush()

    def _text(self, done: int, simulated: timedelta) -> str:
        filled = int(WIDTH * done / max(self._total, 1))
        bar = "#" * filled + "-" * (WIDTH - filled)
        return f"[{bar}] {done}/{self._total} orders settled, {simulated.total_seconds():7.0f}s simulated"
