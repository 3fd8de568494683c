"""One core for the runner's Python threads, the others for its Cosmos DB server.

The runner is one Python process whose threads take turns: the virtual-time scheduler hands a baton from
task to task (``localrun.virtual_time``), and every invocation crosses from its task's thread to the worker's
event loop thread and back several times (``localrun.worker.executor``). Only one of them runs Python at a
time anyway (the GIL), so more cores give it nothing, while each hand-over to a thread the kernel put on
another core costs a cross-core wake-up and a cold cache. Kept to one core, the hand-overs are cheap; the
Node.js Cosmos DB server, a separate process answering those threads, gets the other cores.

Measured on the 2-core development machine, 1,000 orders all-faults, seed 1: 96.4 s of wall and 96.8 s of
CPU unpinned, 77.7 s and 77.9 s pinned (docs/benchmark.md).

The core is the idlest one when the run starts (``/proc/stat`` over a fifth of a second), and only when the
machine has room for it (``choose_core``): a run started beside another busy one is left to the kernel, and a
run gives its cores back when the machine gets busy or another process takes its core (``_watch``).
``simulate`` keeps to one core (and so does each run of ``fuzz``, a ``simulate`` process); ``simulate
--all-cores`` never does. Linux only; elsewhere, and with a single allowed core, nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
# Idle cores (summed idle shares) the run needs to keep to one: its own and most of one for the Cosmos DB server.
ROOM = 1.5
# Pinning is given up when the allowed cores are idle for less than this much of a core, or other processes take more
# than SHARED of the runner's core, BUSY_SAMPLES seconds in a row.
BUSY_IDLE = 0.35
SHARED = 0.3
BUSY_SAMPLES = 3
WATCH_EVERY_S = 1.0  # how often the watch samples


@dataclass
class Placement:
    """Where the runner put itself: ``core`` for every thread of this process, ``others`` for its helpers;
    ``given_up``: the machine got busy and every core was given back during the run."""

    core: int
    others: frozenset[int]
    given_up: bool = False

    def summary(self) -> dict[str, int | bool]:
        """For the report's ``runtime.one_core``."""
        return {"core": self.core, "given_up": self.given_up}


_active = False  # within a block (its pinning, if any, may have been given up since)
_placement: Placement | None = None  # the block's while its pinning holds
_helpers: set[int] = set()  # the helpers placed and not stopped, given every core back when the pinning is given up
# Held while helpers are placed, forgotten or given every core back: a helper placed as the pinning is given up is
# given every core back too, and one forgotten (stopped: its pid may be another process's once reaped) is not touched.
_lock = threading.Lock()


@contextlib.contextmanager
def one_core(sample_s: float = 0.2) -> Iterator[Placement | None]:
    """Within the block, every thread of this process (and every thread started in it) runs on the idlest
    allowed core, and ``place_helper`` puts helpers on the others; afterwards every thread may use the cores
    the process had before (a test that calls the command in its own process keeps its cores). Yields the
    placement, or None when nothing was changed: no ``sched_setaffinity``, one allowed core, no room
    (``choose_core``), a core the kernel refuses (gone offline since the sample), or a block inside another
    (even one whose pinning was given up)."""
    global _active, _placement
    if not hasattr(os, "sched_setaffinity") or _active:
        yield None
        return
    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        yield None
        return
    _active = True
    stop = threading.Event()
    watch = None
    moved = False
    try:  # from here on, however the block ends (an exception, Ctrl-C or SIGTERM while sampling): every core back
        core = choose_core(idle_fractions(allowed, sample_s))
        if core is not None:
            moved = True
            if _move_threads({core}):
                _placement = Placement(core, allowed - {core})
                thread = threading.Thread(
                    target=_watch, args=(_placement, allowed, stop), name="localrun-affinity", daemon=True
                )
                thread.start()
                watch = thread  # joined below once started
        yield _placement
    finally:
        stop.set()
        if watch is not None:
            watch.join()
        with _lock:
            _placement = None
            _helpers.clear()
        if moved:
            _move_threads(allowed)  # given up or not: a thread started as it was given up may still be on the core
        _active = False


def _watch(placement: Placement, allowed: frozenset[int], stop: threading.Event) -> None:
    """Gives the pinning up once the machine is busy (``saturated``) or another process takes the runner's core
    (``shared``), ``BUSY_SAMPLES`` seconds in a row: the process and its helpers get every allowed core back for
    the rest of the run, and the kernel shares them, which it does better than a pinned run can (another run
    started beside this one, a test suite, two runs that chose the same core)."""
    global _placement
    busy_for = 0
    before, used_before = _ticks(), _cpu_ticks()
    while not stop.wait(WATCH_EVERY_S):
        after, used = _ticks(), _cpu_ticks()
        busy = saturated(before, after, allowed) or shared(before, after, placement.core, used - used_before)
        busy_for = busy_for + 1 if busy else 0
        before, used_before = after, used
        if busy_for >= BUSY_SAMPLES:
            with _lock:
                placement.given_up = True
                _placement = None
                _move_threads(allowed)
                for pid in _helpers:
                    _move_threads(allowed, pid)
            return


def saturated(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], allowed: frozenset[int]) -> bool:
    """Whether the allowed cores were idle for less than ``BUSY_IDLE`` of a core between two ``_ticks``
    samples (False when they cannot be read). A run alone on a 2-core machine leaves about 0.95 idle (its
    Cosmos DB server takes the rest); two runs leave none."""
    shares = [
        (after[cpu][0] - before[cpu][0]) / (after[cpu][1] - before[cpu][1])
        for cpu in allowed
        if cpu in before and cpu in after and after[cpu][1] > before[cpu][1]
    ]
    return bool(shares) and sum(shares) < BUSY_IDLE


def shared(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], core: int, used: float) -> bool:
    """Whether other processes took more than ``SHARED`` of the runner's core between two ``_ticks`` samples, the
    runner (every thread of it on that core) having used ``used`` ticks of CPU (False when it cannot be read). A run
    alone leaves its core to itself (about 0.05 to others, kernel work); two runs that chose the same core take
    half of it each (measured: 0.5, their servers' core 84 % idle)."""
    if core not in before or core not in after or after[core][1] <= before[core][1]:
        return False
    total = after[core][1] - before[core][1]
    busy = total - (after[core][0] - before[core][0])
    return (busy - used) / total > SHARED


def place_helper(pid: int) -> None:
    """Puts a helper process (the Cosmos DB server), every thread it has, on the cores the runner left, when
    it keeps to one; threads the helper starts later inherit that from the thread that starts them. The
    helper's owner calls ``forget_helper`` before it reaps the helper."""
    with _lock:
        if _placement is not None:
            _helpers.add(pid)
            _move_threads(_placement.others, pid)


def forget_helper(pid: int) -> None:
    """The helper ``pid`` is about to be stopped and reaped, after which its pid may be another process's: the
    pinning, given up later, leaves that pid alone."""
    with _lock:
        _helpers.discard(pid)


def idle_fractions(allowed: frozenset[int], sample_s: float) -> dict[int, float]:
    """Each allowed core's idle share (0-1) over ``sample_s``, from ``/proc/stat``; empty when that cannot
    be read."""
    before = _ticks()
    time.sleep(sample_s)
    after = _ticks()
    return {
        cpu: (after[cpu][0] - before[cpu][0]) / (after[cpu][1] - before[cpu][1])
        for cpu in sorted(allowed)
        if cpu in before and cpu in after and after[cpu][1] > before[cpu][1]
    }


def choose_core(shares: dict[int, float]) -> int | None:
    """The idlest core, when the cores sampled are idle enough for the runner on one and the Cosmos DB server on
    the others (``ROOM``): None otherwise, or with no sample. A run started beside a busy one on a 2-core machine
    finds about one core busy and is left to the kernel (two runs pinned on the two cores, each beside the other's
    Cosmos DB server, took 18.6 s against 15.8 s unpinned, 200 orders each)."""
    if not shares or sum(shares.values()) < ROOM:
        return None
    return max(shares, key=lambda cpu: (shares[cpu], -cpu))


def _ticks() -> dict[int, tuple[int, int]]:
    """Per core (idle + iowait ticks, all ticks) from ``/proc/stat``; empty when it cannot be read. All ticks are
    the first eight counts: guest and guest_nice, a virtual machine's time, are in user and nice already."""
    ticks: dict[int, tuple[int, int]] = {}
    try:
        lines = (PROC / "stat").read_text().splitlines()
    except OSError:
        return ticks
    for line in lines:
        name, _, rest = line.partition(" ")
        fields = rest.split()
        if name.startswith("cpu") and name[3:].isdigit() and len(fields) >= 5 and all(f.isdigit() for f in fields):
            counts = [int(f) for f in fields]
            ticks[int(name[3:])] = (counts[3] + counts[4], sum(counts[:8]))
    return ticks


def _cpu_ticks() -> float:
    """The CPU this process used so far (user + system, every thread), in ``/proc/stat`` ticks."""
    used = os.times()
    return (used.user + used.system) * os.sysconf("SC_CLK_TCK")


def _move_threads(cores: set[int] | frozenset[int], pid: int | None = None) -> bool:
    """Allows every thread of process ``pid`` (None: this one) only ``cores``; for this process, whether this
    thread got them (False: the kernel refused them, a core gone offline or out of the cpuset, a sandbox)."""
    for tid in _threads(pid) or [pid or 0]:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread or helper that ended since the listing, or a sandbox that refuses: harmless
            continue
    if pid is not None:
        return True
    try:
        os.sched_setaffinity(0, cores)  # this thread, whatever the listing held
    except OSError:
        return False
    return True


def _threads(pid: int | None = None) -> list[int]:
    """The thread ids of process ``pid`` (None: this one); empty when they cannot be listed."""
    try:
        return [int(tid) for tid in os.listdir(PROC / str(pid or "self") / "task") if tid.isdigit()]
    except OSError:
        return []
