"""The app reads the time and draws randomness only through what the composition injects (``AppContext.clock``,
``AppContext.rng``, ``AppContext.unguessable``; orchestrators ``context.current_utc_datetime``), which the local
runner replaces with its simulated clock and generators seeded from the run's seed: that is what makes a
simulation reproducible by its seed (docs/local-runner.md, "Determinism"). A new ``time.monotonic()``,
``datetime.now()``, ``random.uniform()`` or ``uuid4()`` in app code would read the real clock or unseeded
randomness in a simulation too, and make a seed's run differ from one run to the next (a jittered pause drawing
from ``random`` itself, say). Each read of real time the app makes on purpose is listed below with its reason.

Scans the source (``ast``): names as written, ``time.monotonic`` referenced as well as called."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = (
    "activities",
    "adapters",
    "contracts",
    "deferral",
    "domain",
    "notifications",
    "observability",
    "operations",
    "orchestrators",
    "order_agents",
    "retention",
    "submission",
    "supervisor",
    "dependencies.py",
    "function_app.py",
    "settings.py",
)

# module -> the names in it that read real time or draw randomness no seed reproduces
REAL = {
    "time": {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep"},
    "datetime": {"now", "utcnow", "today"},
    "date": {"today"},
    "uuid": {"uuid1", "uuid4"},
    "os": {"urandom", "getrandom"},
    "random": {
        "random",
        "uniform",
        "randint",
        "randrange",
        "choice",
        "choices",
        "shuffle",
        "sample",
        "gauss",
        "getrandbits",
        "randbytes",
        "SystemRandom",
        "Random",  # allowed with a seed: ``random.Random(seed)``
    },
    "secrets": {"*"},
    "asyncio": {"sleep"},
}

# (file, name): why it may read the real thing
ALLOWED = {
    ("adapters/clock.py", "datetime.now"): "SystemClock: the production clock the context injects",
    ("adapters/clock.py", "time.sleep"): "SystemClock.sleep",
    ("dependencies.py", "random.Random"): "AppContext.rng's production default; the runner gives a seeded one",
    ("dependencies.py", "random.SystemRandom"): "AppContext.unguessable's production default; the runner's is seeded",
    ("order_agents/circuit_gate.py", "random.Random"): "DependencyGate without an rng (tests); gate_of passes ctx.rng",
    ("domain/retry.py", "random"): "exponential_backoff without an rng (tests); every caller passes ctx.rng",
    # Budgets and bounds of real waits: Durable client calls on the worker's real event loop, measured on the
    # monotonic clock (docs/local-runner.md, "Determinism": in a simulation they measure real time, far inside them)
    ("adapters/durable_client.py", "time.monotonic"): "CallBudget: the starts' and terminations' budgets",
    ("retention/purge.py", "time.monotonic"): "the history purge's run budget",
    ("adapters/dead_letter_ports.py", "time.monotonic"): "the dead-letter watch's run budget",
    ("adapters/remote/http_service.py", "time.monotonic"): "the real HTTP client's deadline, its pool's idle age",
}


def _sources() -> list[Path]:
    files: list[Path] = []
    for name in APP:
        path = ROOT / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def _reads(path: Path) -> list[tuple[str, int, bool]]:
    """(module.name, line, called with no arguments) of every real-time or randomness name ``path`` refers to."""
    tree = ast.parse(path.read_text(), str(path))
    imported: dict[str, str] = {}  # local name -> module.name, from ``from time import monotonic``
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in REAL:
            for alias in node.names:
                names = REAL[node.module]
                if alias.name in names or "*" in names:
                    imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    annotations = {
        id(inner)
        for node in ast.walk(tree)
        for annotation in (getattr(node, "annotation", None), getattr(node, "returns", None))
        if annotation is not None
        for inner in ast.walk(annotation)
    }
    # ``random`` itself used as a generator: ``(rng or random).uniform(...)``
    modules = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    calls = {
        id(node.func): not node.args and not node.keywords for node in ast.walk(tree) if isinstance(node, ast.Call)
    }
    found: list[tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        if id(node) in annotations:  # a type, not a read
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names = REAL.get(node.value.id, set())
            if node.attr in names or "*" in names:
                found.append((f"{node.value.id}.{node.attr}", node.lineno, calls.get(id(node), True)))
        elif isinstance(node, ast.Name) and node.id == "random" and id(node) not in modules:
            found.append(("random", node.lineno, False))
        elif isinstance(node, ast.Name) and node.id in imported and isinstance(node.ctx, ast.Load):
            found.append((imported[node.id], node.lineno, calls.get(id(node), True)))
    return found


def test_app_code_reads_time_and_randomness_only_through_what_the_context_injects() -> None:
    unexplained: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in _sources():
        relative = path.relative_to(ROOT).as_posix()
        for name, line, bare in _reads(path):
            if name == "random.Random" and not bare and (relative, name) not in ALLOWED:
                continue  # seeded: random.Random(seed)
            if (relative, name) in ALLOWED:
                used.add((relative, name))
                continue
            unexplained.append(f"{relative}:{line}: {name}")
    assert unexplained == [], (
        f"{unexplained}: real time or unseeded randomness outside the injected clock and generators "
        "(AppContext.clock, .rng, .unguessable): a simulation would not be reproducible by its seed"
    )
    assert used == set(ALLOWED), f"allowed but no longer read (drop them): {sorted(set(ALLOWED) - used)}"


def test_the_scan_sees_a_jitter_drawn_from_the_random_module(tmp_path: Path) -> None:
    """What the scan catches: the ways a pause could take real time or unseeded randomness."""
    source = tmp_path / "pause.py"
    source.write_text(
        "import random, time\n"
        "from time import monotonic as now\n"
        "def pause(lost: int, rng: random.Random | None = None) -> random.Random:\n"
        "    time.sleep(random.uniform(0, 0.01 * lost))\n"
        "    return now(), random.Random(), random.Random(7), (rng or random).random()\n"
    )
    assert sorted((line, name, bare) for name, line, bare in _reads(source)) == [
        (4, "random.uniform", False),
        (4, "time.sleep", False),
        (5, "random", False),
        (5, "random.Random", False),
        (5, "random.Random", True),
        (5, "time.monotonic", True),
    ]
