"""The runner keeps its threads to one core and its Cosmos DB server to the others (``localrun.affinity``),
only when the machine has room, gives the cores back afterwards, and gives the pinning up when the machine
gets busy. The placement is real (``sched_setaffinity`` on this process, its threads, a Node.js server);
only the idle figures of ``/proc/stat`` are chosen by the tests, through a ``/proc`` of their own or the
sampler."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from localrun import affinity
from localrun.cosmos_server import CosmosServer

ALLOWED = frozenset(os.sched_getaffinity(0))
needs_two_cores = pytest.mark.skipif(len(ALLOWED) < 2, reason="pinning needs two allowed cores")


def masks(pid: int | None = None) -> set[frozenset[int]]:
    """The distinct allowed-core sets of every thread of process ``pid`` (None: this one)."""
    task = Path("/proc", str(pid or "self"), "task")
    return {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(task)}


@pytest.fixture
def room(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The sampler reports every allowed core idle, the highest-numbered one idlest: the chosen core."""
    core = max(ALLOWED)
    monkeypatch.setattr(affinity, "idle_fractions", lambda allowed, _s: {c: 0.9 + (c == core) * 0.1 for c in allowed})
    yield core
    assert masks() == {ALLOWED}  # every test leaves the process as it found it


def stat(idle: dict[int, tuple[int, int]]) -> str:
    """A /proc/stat of cores with (idle ticks, all ticks): user, nice, system, idle, iowait, irq, softirq."""
    lines = ["cpu  1 1 1 1 1 1 1"]
    for cpu, (idle_ticks, total) in sorted(idle.items()):
        lines.append(f"cpu{cpu} {total - idle_ticks} 0 0 {idle_ticks - 1} 1 0 0 0 0 0")
    return "\n".join([*lines, "intr 5 0", "ctxt 7"]) + "\n"


def test_ticks_read_idle_and_iowait_per_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "stat").write_text(stat({0: (40, 100), 1: (90, 100)}))
    monkeypatch.setattr(affinity, "PROC", tmp_path)
    assert affinity._ticks() == {0: (40, 100), 1: (90, 100)}
    (tmp_path / "stat").unlink()
    assert affinity._ticks() == {}


def test_the_idlest_core_is_chosen_only_with_room_for_the_server() -> None:
    assert affinity.choose_core({0: 0.3, 1: 0.95, 2: 0.9}) == 1
    assert affinity.choose_core({0: 0.9, 1: 0.9}) == 0  # a tie: the lowest
    # a run already busy on one of two cores: left to the kernel
    assert affinity.choose_core({0: 0.05, 1: 0.9}) is None
    assert affinity.choose_core({}) is None


def test_a_machine_idle_for_less_than_a_third_of_a_core_is_saturated() -> None:
    before = {0: (0, 0), 1: (0, 0)}
    alone = {0: (10, 100), 1: (85, 100)}  # a run and its Cosmos DB server: 0.95 idle
    two_runs = {0: (2, 100), 1: (3, 100)}
    both = frozenset({0, 1})
    assert not affinity.saturated(before, alone, both)
    assert affinity.saturated(before, two_runs, both)
    assert not affinity.saturated({}, two_runs, both)  # nothing read: not saturated
    assert not affinity.saturated(before, two_runs, frozenset({7}))  # no such core


@needs_two_cores
def test_every_thread_keeps_to_the_core_and_gets_the_cores_back(room: int) -> None:
    started = threading.Event()
    release = threading.Event()
    before = threading.Thread(target=release.wait)
    before.start()  # a thread that was running when the block began
    seen: list[set[frozenset[int]]] = []
    try:
        with affinity.one_core() as placement:
            assert placement == affinity.Placement(room, ALLOWED - {room}, given_up=False)

            def run() -> None:
                started.set()
                release.wait()

            inside = threading.Thread(target=run)
            inside.start()
            started.wait(5)
            seen.append(masks())
        after = masks()
    finally:
        release.set()
        before.join()
        inside.join()
    assert seen == [{frozenset({room})}]
    assert after == {ALLOWED}


@needs_two_cores
def test_the_cosmos_server_runs_on_the_other_cores(room: int) -> None:
    with affinity.one_core(), CosmosServer() as server:
        assert server._proc is not None
        node = server._proc.pid
        assert masks(node) == {ALLOWED - {room}}
        assert masks() == {frozenset({room})}
    with CosmosServer() as server:  # outside the block, nothing is placed
        assert server._proc is not None
        assert masks(server._proc.pid) == {ALLOWED}


@needs_two_cores
def test_no_room_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "idle_fractions", lambda allowed, _s: dict.fromkeys(allowed, 0.1))
    with affinity.one_core() as placement:
        assert placement is None
        assert masks() == {ALLOWED}


@needs_two_cores
def test_a_busy_machine_ends_the_pinning_for_the_rest_of_the_run(room: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = {c: [0, 0] for c in ALLOWED}

    def saturating() -> dict[int, tuple[int, int]]:  # every sample: 100 more ticks per core, none idle
        for count in ticks.values():
            count[1] += 100
        return {c: (i, t) for c, (i, t) in ticks.items()}

    monkeypatch.setattr(affinity, "WATCH_EVERY_S", 0.05)
    with affinity.one_core() as placement:
        assert placement is not None
        assert masks() == {frozenset({room})}
        monkeypatch.setattr(affinity, "_ticks", saturating)
        deadline = time.monotonic() + 10
        while masks() != {ALLOWED} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert masks() == {ALLOWED}
        assert affinity._placement is None  # a helper started now is not placed
    assert masks() == {ALLOWED}
    assert placement.summary() == {"core": room, "given_up": True}


@needs_two_cores
def test_a_quiet_machine_keeps_the_pinning(room: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = {c: [0, 0] for c in ALLOWED}

    def quiet() -> dict[int, tuple[int, int]]:  # every sample: the other cores half idle, this process's core idle
        for cpu, count in ticks.items():
            count[0] += 100 if cpu == room else 50
            count[1] += 100
        return {c: (i, t) for c, (i, t) in ticks.items()}

    monkeypatch.setattr(affinity, "WATCH_EVERY_S", 0.02)
    monkeypatch.setattr(affinity, "_ticks", quiet)
    with affinity.one_core() as placement:
        time.sleep(0.02 * (affinity.BUSY_SAMPLES + 5))
        assert masks() == {frozenset({room})}
    assert placement is not None
    assert not placement.given_up


def give_up_when(monkeypatch: pytest.MonkeyPatch, sample: Callable[[dict[int, list[int]]], None]) -> None:
    """From now on every watch sample moves each core's (idle, all) ticks by ``sample``; the watch samples often."""
    ticks = {c: [0, 0] for c in ALLOWED}

    def sampled() -> dict[int, tuple[int, int]]:
        sample(ticks)
        return {c: (i, t) for c, (i, t) in ticks.items()}

    monkeypatch.setattr(affinity, "WATCH_EVERY_S", 0.05)
    monkeypatch.setattr(affinity, "_ticks", sampled)


def saturating(ticks: dict[int, list[int]]) -> None:  # 100 more ticks per core, none idle
    for count in ticks.values():
        count[1] += 100


def wait_for(done: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)
    return done()


def test_ticks_count_guest_time_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel counts a virtual machine's time (guest, guest_nice) in user and nice as well: a core of a
    machine that runs one, half idle, is half idle."""
    (tmp_path / "stat").write_text("cpu0 30 20 0 40 10 0 0 0 30 20\n")
    monkeypatch.setattr(affinity, "PROC", tmp_path)
    assert affinity._ticks() == {0: (50, 100)}


@needs_two_cores
def test_a_core_that_cannot_be_had_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core sampled idlest went offline (or out of the container's cpuset) before the run kept to it: the
    kernel refuses it, and the run goes on, on every core, as if there had been no room."""
    gone = 1023  # no such core: sched_setaffinity answers EINVAL, as for a core taken offline
    monkeypatch.setattr(affinity, "idle_fractions", lambda allowed, _s: {**dict.fromkeys(allowed, 0.9), gone: 1.0})
    with affinity.one_core() as placement:
        assert placement is None
        assert masks() == {ALLOWED}
    assert affinity._placement is None
    monkeypatch.setattr(affinity, "idle_fractions", lambda allowed, _s: dict.fromkeys(allowed, 0.9))
    with affinity.one_core() as placement:  # the next run keeps to a core again
        assert placement is not None
    assert masks() == {ALLOWED}


@needs_two_cores
def test_a_block_inside_one_whose_pinning_was_given_up_changes_nothing(
    room: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with affinity.one_core() as outer:
        assert outer is not None
        give_up_when(monkeypatch, saturating)
        assert wait_for(lambda: outer.given_up)
        with affinity.one_core() as inner:
            assert inner is None
            assert masks() == {ALLOWED}


@needs_two_cores
def test_a_server_stopped_is_not_touched_when_the_pinning_is_given_up(
    room: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a helper is stopped (and reaped) its pid may be another process's: giving the pinning up must not
    set that process's cores."""
    targets: list[int] = []
    real = os.sched_setaffinity

    def recorded(pid: int, cores: Iterable[int]) -> None:
        targets.append(pid)
        real(pid, cores)

    with affinity.one_core() as placement:
        assert placement is not None
        with CosmosServer() as server:
            assert server._proc is not None
            node = server._proc.pid
        monkeypatch.setattr(os, "sched_setaffinity", recorded)
        give_up_when(monkeypatch, saturating)
        assert wait_for(lambda: placement.given_up)
    assert targets  # the runner's own threads got every core back
    assert node not in targets


def test_a_core_another_process_takes_a_third_of_is_shared() -> None:
    before = {0: (0, 0), 1: (0, 0)}
    alone = {0: (5, 100), 1: (85, 100)}  # the run on core 0 used 92 of its 95 busy ticks
    assert not affinity.shared(before, alone, 0, used=92)
    assert affinity.shared(before, alone, 0, used=50)  # two runs on core 0: half of it each
    assert not affinity.shared({}, alone, 0, used=0)  # nothing read: not shared
    assert not affinity.shared(before, alone, 7, used=0)  # no such core


@needs_two_cores
def test_another_process_on_the_runners_core_ends_the_pinning(room: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs started at the same moment can both find the same core idlest: each keeps to it beside the other,
    at half speed, while the core their servers share stays mostly idle. The machine as a whole is not busy; the
    runner's core is, and by another process than this one."""

    def crowded(ticks: dict[int, list[int]]) -> None:  # this core busy (this process all but idle), the others idle
        for cpu, count in ticks.items():
            count[0] += 0 if cpu == room else 100
            count[1] += 100

    with affinity.one_core() as placement:
        assert placement is not None
        give_up_when(monkeypatch, crowded)
        assert wait_for(lambda: placement.given_up)
        assert masks() == {ALLOWED}


def test_without_sched_setaffinity_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS, Windows: no pinning, and the Cosmos DB server starts and stops as ever."""
    monkeypatch.delattr(os, "sched_setaffinity")
    with affinity.one_core() as placement, CosmosServer() as server:
        assert placement is None
        assert server._proc is not None
        assert masks(server._proc.pid) == {ALLOWED}
    assert masks() == {ALLOWED}


@needs_two_cores
def test_a_process_allowed_one_core_is_left_alone(room: int) -> None:
    """``taskset -c N``, a cpuset of one core: nothing to share, nothing changes."""
    os.sched_setaffinity(0, {room})
    try:
        with affinity.one_core() as placement:
            assert placement is None
            assert os.sched_getaffinity(0) == {room}
    finally:
        os.sched_setaffinity(0, ALLOWED)
