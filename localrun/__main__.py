"""``python -m localrun simulate|serve|fuzz``: each command's options in its ``--help``, and in
docs/local-runner.md ("Command line"), where tests/test_docs.py holds them to ``command_line``.

Runs the whole app with no Azure: prints a summary, writes the JSON report (and the chart), and
exits 1 if any invariant is violated.

``serve``: the live demo, with the ops API and console on http://127.0.0.1:P (localrun/serve.py).
``fuzz``: a random fault profile per seed, each run as ``simulate`` runs it; the failing ones kept in DIR
(localrun/fuzz.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import TextIO

from localrun.app_logs import app_log_level
from localrun.cosmos_server import ServerDied, ServerUnavailable
from localrun.profile import Profile, ProfileError
from localrun.progress import quiet

ORDERS = "how many orders the run's submitters send"
SEED = "the seed every random draw of the run comes from: the same seed and profile, the same run"
NO_PROGRESS = "no progress line on stderr"
LOG_LEVEL = "the app's logs shown on stderr (default CRITICAL: none; INFO shows every state transition)"
# serve's fastest pace: its 7-day horizon in about a minute; past this (inf, 1e308) the pacer's clock overflows
MAX_SPEED = 10_000.0


def command_line() -> argparse.ArgumentParser:
    """The runner's command line (``tests/test_docs.py`` parses every command the docs show with it)."""
    parser = argparse.ArgumentParser(prog="python -m localrun", description=__doc__.split("\n\n")[1])
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="run N orders through the app under a fault profile")
    sim.add_argument("--orders", type=int, required=True, help=ORDERS)
    sim.add_argument("--seed", type=int, required=True, help=SEED)
    sim.add_argument("--faults", type=Path, help="fault profile JSON (default: no faults)")
    sim.add_argument("--report", type=Path, required=True, help="where the JSON report is written")
    sim.add_argument(
        "--chart", type=Path, help="where the chart of orders by state is written (.png, .svg, .pdf...; none: PNG)"
    )
    sim.add_argument("--no-progress", action="store_true", help=NO_PROGRESS)
    sim.add_argument(
        "--horizon-hours",
        type=float,
        default=8.0,
        help="stop after this much simulated time even if orders are unsettled (default 8)",
    )
    sim.add_argument(
        "--inject-raw",
        type=Path,
        help='JSON lines {"body": "...", "message_id": "...", "at_s": S} put on the orders queue (message_id and '
        "at_s optional)",
    )
    sim.add_argument(
        "--sdk-speed-ups",
        action="store_true",
        help="patch two hot spots of the Durable SDK's replay for speed (off: the SDK runs as shipped)",
    )
    sim.add_argument(
        "--all-cores",
        action="store_true",
        help="let the run's threads use every core (default: the idlest core for them, the others for the "
        "Cosmos DB server: faster, localrun/affinity.py)",
    )
    sim.add_argument(
        "--log-level",
        default="CRITICAL",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help=LOG_LEVEL,
    )
    serve = sub.add_parser(
        "serve", help="the live demo: the simulation at X times real time with the ops API and console on 127.0.0.1"
    )
    serve.add_argument("--orders", type=int, required=True, help=ORDERS)
    serve.add_argument("--seed", type=int, required=True, help=SEED)
    serve.add_argument("--faults", type=Path, help="fault profile JSON (default: no faults)")
    serve.add_argument("--speed", type=float, default=10.0, help="simulated seconds per real second (default 10)")
    serve.add_argument("--port", type=int, default=7071, help="port on 127.0.0.1 (default 7071; 0: any free port)")
    serve.add_argument(
        "--review-timeout",
        type=int,
        default=1800,
        help="simulated seconds a review pause waits for you before its default action (default 1800)",
    )
    serve.add_argument("--exit-when-done", action="store_true", help="stop once every order is settled")
    serve.add_argument("--no-progress", action="store_true", help=NO_PROGRESS)
    serve.add_argument(
        "--log-level",
        default="CRITICAL",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help=LOG_LEVEL,
    )
    fuzz = sub.add_parser("fuzz", help="random fault profiles, one per seed, each run as simulate runs it")
    fuzz.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    fuzz.add_argument("--count", type=int, default=10, help="how many seeds (default 10)")
    fuzz.add_argument("--orders", type=int, default=150, help="orders per run (default 150)")
    fuzz.add_argument(
        "--out", type=Path, default=Path("fuzz-runs"), help="where failing seeds are kept (default fuzz-runs)"
    )
    fuzz.add_argument("--timeout", type=float, default=1800, help="seconds a run may take (default 1800)")
    return parser


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a CI job cancelled, ``kill``, the terminal closed), raised where the run is as
    Ctrl-C's ``KeyboardInterrupt`` is: the same clean-up runs (the Cosmos DB server stopped, ``fuzz``'s run
    of a seed ended, no partial file left) instead of the process vanishing mid-write."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextmanager
def _stops_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Stopped`` while in the block (the main thread only: elsewhere signals
    cannot be handled); the handlers before it are put back after."""
    numbers = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, _raise_stopped) for number in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def say(text: str, stream: TextIO | None = None) -> None:
    """``print`` (to stdout, or ``stream``) that survives its reader gone (``| head``): the run goes on, its
    report written and its exit code the verdict, without a BrokenPipeError traceback."""
    stream = stream or sys.stdout
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:
        quiet(stream)


def main(argv: list[str] | None = None) -> int:
    """The command; an interrupted one (Ctrl-C, SIGTERM, SIGHUP) says so in one line, without a traceback,
    and exits 128 + the signal's number (130 for Ctrl-C)."""
    # started with stdout or stderr closed (``2>&-``, a daemon's closed descriptors): Python leaves them None,
    # and the run stopped at its first progress line with no report; what they would show goes nowhere
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the rest of the process)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for the rest of the process)
    parser = command_line()
    args = parser.parse_args(argv)
    written: list[Path] = []
    try:
        with _stops_raise():
            return _command(parser, args, written)
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        kept = f"; written before it: {', '.join(map(str, written))}" if written else ""
        with contextlib.suppress(OSError):  # stderr gone with the terminal (SIGHUP)
            print(f"\ninterrupted ({signal.Signals(signum).name}): stopped{kept}", file=sys.stderr, flush=True)
        return 128 + signum
    except BrokenPipeError:  # a reader gone while something other than ``say`` printed
        quiet(sys.stdout)
        quiet(sys.stderr)
        return 128 + 13  # as a command killed by SIGPIPE


def _command(parser: argparse.ArgumentParser, args: argparse.Namespace, written: list[Path]) -> int:
    if args.command == "fuzz":
        if args.count < 1 or args.orders < 1 or not 0 < args.timeout < math.inf:
            parser.error("--count and --orders must be >= 1 and --timeout a number of seconds > 0")
        if args.out.exists() and not args.out.is_dir():
            parser.error(f"--out {args.out}: is not a folder")  # before the first seed, not at it
        from localrun.fuzz import fuzz as run_fuzz

        return run_fuzz(args.first, args.count, args.orders, args.out, args.timeout)
    if args.command == "serve" and (
        not 0 < args.speed <= MAX_SPEED or args.review_timeout < 1 or not 0 <= args.port < 65536
    ):
        parser.error(f"--speed must be > 0 and at most {MAX_SPEED:g}, --review-timeout >= 1 and --port 0-65535")
    if args.orders < 0:
        parser.error("--orders must be >= 0")
    if args.command == "simulate" and not 0 < args.horizon_hours <= 24 * 365:
        parser.error("--horizon-hours must be > 0 and at most a year")
    if args.command == "simulate":
        for option, path in (("--report", args.report), ("--chart", args.chart)):
            problem = _unwritable(path) if path is not None else None
            if path is not None and option == "--chart" and problem is None:
                problem = _chart_format_problem(path)
            if problem:
                parser.error(f"{option} {path}: {problem}")  # before the run, not after it

    # Our own stderr handler, removed afterwards; the app's own loggers let the level asked through for the run
    # (localrun/app_logs.py). Nothing else's logging is changed.
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(args.log_level)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings():
            # The Durable SDK warns when a second event of one name arrives; the duplicate-reply
            # faults do that on purpose and the scheduler ignores the copy.
            warnings.filterwarnings("ignore", message="Potential duplicate Task completion")
            with app_log_level(args.log_level):
                return _serve(args) if args.command == "serve" else _simulate(args, written)
    finally:
        root.removeHandler(handler)


def _unwritable(path: Path) -> str | None:
    """Why the run could not write ``path`` at its end (its folder is created here), or None."""
    if path.is_dir():
        return "is a directory"
    if path.exists() and not path.is_file():  # /dev/null, /dev/stdout, a named pipe: written as they are
        return None if os.access(path, os.W_OK) else "is not writable"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"its folder cannot be created ({exc.strerror or exc})"
    if not os.access(path.parent, os.W_OK):
        return f"its folder {path.parent} is not writable"
    return None


def _chart_format_problem(path: Path) -> str | None:
    """Why the chart cannot be drawn in the format ``path``'s suffix names (none: PNG), or None."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from localrun.chart import chart_format

    formats = FigureCanvasAgg.get_supported_filetypes()
    if chart_format(path) not in formats:
        return f"no chart format {chart_format(path)!r} (one of: {', '.join(sorted(formats))}; no suffix: PNG)"
    return None


def write_whole(path: Path, write: Callable[[Path], object]) -> None:
    """``write`` to a file beside ``path``, then renamed to it: ``path`` is the whole file or what it was
    before, never a part (an interrupted run, a full disk); the part is removed. A symbolic link's target is
    written so; what is no file (``/dev/null``, ``/dev/stdout``, a named pipe) is written as it is, never
    replaced by one."""
    if path.exists() and not path.is_file():
        write(path)
        return
    path = Path(os.path.realpath(path))  # a link stays a link, to the new file
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        write(part)
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _simulate(args: argparse.Namespace, written: list[Path]) -> int:
    try:
        profile = Profile.load(args.faults) if args.faults else Profile()
    except (ProfileError, OSError) as exc:
        print(f"fault profile: {exc}", file=sys.stderr)
        return 2
    from localrun.workload import read_raw

    try:
        raw = read_raw(args.inject_raw) if args.inject_raw else []
    except (ValueError, OSError) as exc:
        print(f"--inject-raw: {exc}", file=sys.stderr)
        return 2

    from localrun.report import build_report, summary
    from localrun.simulation import SimulationConfig, run_simulation

    config = SimulationConfig(
        orders=args.orders,
        seed=args.seed,
        profile=profile,
        raw_lines=raw,
        progress=not args.no_progress,
        sdk_speed_ups=args.sdk_speed_ups,
        horizon=timedelta(hours=args.horizon_hours),
    )
    from localrun.affinity import one_core

    try:
        with contextlib.nullcontext() if args.all_cores else one_core() as placement:
            result = run_simulation(config)
    except ServerUnavailable as exc:
        print(f"cannot start the Cosmos DB protocol server: {exc}", file=sys.stderr)
        return 2
    except ServerDied as exc:
        return _died(exc, "run stopped, no report written")
    report = build_report(result)
    report["runtime"]["one_core"] = placement.summary() if placement is not None else None
    text = json.dumps(report, indent=2) + "\n"
    outputs: list[tuple[Path, Callable[[Path], object]]] = [(args.report, lambda part: part.write_text(text))]
    if args.chart:
        from localrun.chart import chart_format, write_chart

        outputs.append((args.chart, lambda part: write_chart(result, part, chart_format(args.chart))))
    for path, write in outputs:
        try:
            write_whole(path, write)
        except OSError as exc:  # a full disk, a folder removed during the run: the summary is still shown
            say(summary(report))
            say(f"\ncould not write {path}: {exc.strerror or exc}", sys.stderr)
            return 2
        written.append(path)
    say(summary(report))
    say(f"\nreport: {args.report}" + (f"   chart: {args.chart}" if args.chart else ""))
    violated = {k: v for k, v in report["invariants"].items() if v}
    if violated:
        say(f"INVARIANTS VIOLATED: {violated}", sys.stderr)
        return 1
    return 0


def _died(exc: ServerDied, what: str) -> int:
    """A server the run started exited unasked: one line on stderr (after the progress line, if any) saying ``what``
    stopped and why, exit code 2 (the run could not be carried out); no report, no summary."""
    say(f"\n{what}: {exc}", sys.stderr)
    return 2


def _serve(args: argparse.Namespace) -> int:
    import threading

    from localrun.report import build_report, summary
    from localrun.serve import (
        LOCAL_OPERATOR,
        PortUnavailable,
        announce,
        announce_settled,
        install_stop_signals,
        paced_drive,
    )
    from localrun.simulation import SimulationConfig, run_simulation
    from settings import SettingsError

    try:
        profile = Profile.load(args.faults) if args.faults else Profile()
    except (ProfileError, OSError) as exc:
        print(f"fault profile: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    install_stop_signals(stop)
    config = SimulationConfig(
        orders=args.orders,
        seed=args.seed,
        profile=profile,
        progress=not args.no_progress,
        horizon=timedelta(days=7),
        # This run's operator is the developer at the console (local-only setting, this run only).
        settings={"REVIEW_TIMEOUT_SECONDS": str(args.review_timeout), "OPS_LOCAL_PRINCIPAL": LOCAL_OPERATOR},
        drive=paced_drive(
            args.speed, args.port, stop, announce, exit_when_done=args.exit_when_done, on_settled=announce_settled
        ),
    )
    try:
        result = run_simulation(config)
    except PortUnavailable as exc:
        print(f"serve: {exc}", file=sys.stderr)
        return 2
    except SettingsError as exc:  # --review-timeout past what the app accepts
        print(f"serve: {exc}", file=sys.stderr)
        return 2
    except ServerUnavailable as exc:
        print(f"cannot start the Cosmos DB protocol server: {exc}", file=sys.stderr)
        return 2
    except ServerDied as exc:
        return _died(exc, "serve stopped, no summary")
    say(summary(build_report(result), served=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
