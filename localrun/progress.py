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

    def _columns(self) -> int:
        """The terminal's width now (it may be resized during the run); 80 when it cannot say."""
        try:
            return os.get_terminal_size(self._stream.fileno()).columns or 80
        except (OSError, ValueError):
            return 80

    def _fitted(self, done: int, simulated: timedelta) -> str:
        """The line to redraw in place, narrower than the terminal: a line that wraps cannot be redrawn with
        ``\\r`` (it goes back to the start of the last row only), and a narrow terminal would fill with the
        rest of every line. The bar gives way first, then the end of the text."""
        room = self._columns() - 1  # the last column: some terminals wrap on writing it
        text = self._text(done, simulated)
        if len(text) > room:
            text = self._text(done, simulated, max(WIDTH - (len(text) - room), 0))
        return text[:room]

    def show(self, done: int, simulated: timedelta) -> None:
        """Shows ``done`` of the run's orders settled; off a terminal only when a new tenth is reached."""
        if self._in_place:
            self._write(f"\r{self._fitted(done, simulated)}")
            return
        step = STEPS * done // max(self._total, 1)
        if step == self._step:
            return
        self._step = step
        self._last = self._text(done, simulated)
        self._write(f"{self._last}\n")

    def end(self, done: int, simulated: timedelta) -> None:
        """The run's last figures (off a terminal, unless the line just written says the same), the line ended."""
        if self._in_place:
            self._write(f"\r{self._fitted(done, simulated)}\n")
            return
        text = self._text(done, simulated)
        if text != self._last:  # not the line just written again
            self._write(f"{text}\n")

    def _text(self, done: int, simulated: timedelta, width: int = WIDTH) -> str:
        filled = int(width * done / max(self._total, 1))
        bar = f"[{'#' * filled}{'-' * (width - filled)}] " if width else ""
        return f"{bar}{done}/{self._total} orders settled, {simulated.total_seconds():7.0f}s simulated"
