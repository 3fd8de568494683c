"""The runner's progress line on stderr: a bar redrawn in place (``\\r``) on a terminal; elsewhere (a CI
log, a file, a pipe) a whole line at each tenth of the orders settled, since a log keeps every ``\\r``
redraw and shows hundreds of them run together as one line. A stream whose reader is gone (``2>&1 | head``,
the terminal closed) ends the progress line, not the run."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TextIO

WIDTH = 30
STEPS = 10  # lines a run writes when stderr is no terminal, besides its last


def quiet(stream: TextIO) -> None:
    """``stream``'s reader is gone: its file descriptor now writes to nowhere (what is still printed, and
    the flush at exit, raise nothing), where it has one."""
    try:
        fileno = stream.fileno()
    except (OSError, ValueError):  # no file descriptor (a StringIO): nothing to quiet
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fileno)
    os.close(devnull)


class ProgressLine:
    def __init__(self, stream: TextIO, total: int) -> None:
        self._stream = stream
        self._total = total
        self._in_place = stream.isatty()
        self._step = -1
        self._last = ""  # the last line written off a terminal
        self._gone = False  # the stream's reader went away: nothing more is written

    def _write(self, text: str) -> None:
        if self._gone:
            return
        try:
            self._stream.write(text)
            self._stream.flush()
        except OSError:  # BrokenPipeError (a pipe's reader ended), EIO (the terminal closed)
            self._gone = True
            quiet(self._stream)

    def show(self, done: int, simulated: timedelta) -> None:
        """Shows ``done`` of the run's orders settled; off a terminal only when a new tenth is reached."""
        text = self._text(done, simulated)
        if self._in_place:
            self._write(f"\r{text}")
        else:
            step = STEPS * done // max(self._total, 1)
            if step == self._step:
                return
            self._step = step
            self._last = text
            self._write(f"{text}\n")

    def end(self, done: int, simulated: timedelta) -> None:
        """The run's last figures (off a terminal, unless the line just written says the same), the line ended."""
        text = self._text(done, simulated)
        if self._in_place:
            self._write(f"\r{text}\n")
        elif text != self._last:  # not the line just written again
            self._write(f"{text}\n")

    def _text(self, done: int, simulated: timedelta) -> str:
        filled = int(WIDTH * done / max(self._total, 1))
        bar = "#" * filled + "-" * (WIDTH - filled)
        return f"[{bar}] {done}/{self._total} orders settled, {simulated.total_seconds():7.0f}s simulated"
