"""``python -m localrun serve`` on a port something else holds (a ``func start``, a second ``serve``: both
default to 7071) says so and how to go on, exit code 2, instead of a traceback from ``socketserver``
(found walking through the README as a new user)."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator

import pytest

from localrun.__main__ import main

pytestmark = pytest.mark.cosmos


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another process's server listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def signals_restored() -> Iterator[None]:
    """``serve`` installs its own SIGINT / SIGTERM handlers: give pytest its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


def test_a_port_in_use_is_exit_code_2_saying_what_to_do(
    held_port: int, signals_restored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--orders", "1", "--seed", "1", "--port", str(held_port), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"cannot listen on 127.0.0.1:{held_port}" in err and "--port 0" in err, err
    assert "Traceback" not in err
