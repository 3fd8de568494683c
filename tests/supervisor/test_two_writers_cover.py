"""The two-writers matrix (``two_writers.py``, with the outage scenes of ``lost_write_races.py``) covers every writer of
the state record in the code, not a list someone must remember to extend.

The writers are found in the source (``ast``): every function of the app's own packages that calls a write
primitive of the state record (``update_fenced``, ``update_once``, ``update_once_or_reread``, a store's ``replace``
or ``create``, the SDK's ``replace_item`` and its kin), or calls a function that only passes a write on
(``PASS_THROUGH``: its callers are the writers, found the same way). Each must be run by an act of the matrix
(``two_writers.COVERS``, declared beside the act) or stand in ``EXCLUDED``, which says why it cannot race. A new
writer fails ``test_every_writer_of_the_state_record_is_in_the_matrix`` until it is one or the other.

A declaration is checked too: ``test_every_act_reaches_the_writers_it_declares`` runs each act alone in the record
states the matrix gives it, in their order, until it has seen every function the act declares entered
(``sys.setprofile``)."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tests.supervisor import lost_write_races
from tests.supervisor.two_writers import COVERS, SCENES, WRITERS, Run, setup

ROOT = Path(__file__).resolve().parents[2]
# The app's own code: every Python file of the repository but the tests' (the local runner and the scripts included).
SKIPPED_DIRS = {"tests", "node_modules"}

# The write primitives of the state record (adapters/cosmos/state_store.py): a call of one of these names, or of a
# store's ``replace``/``create`` (``ctx.states.replace``, ``store.create``), is a write.
PRIMITIVES = {"update_fenced", "update_once", "update_once_or_reread"}
STORE_NAMES = {"states", "store", "_states"}
STORE_WRITES = {"replace", "create"}
SDK_WRITES = {"replace_item", "create_item", "upsert_item", "patch_item", "delete_item", "execute_item_batch"}
# Where the primitives live, and the other documents' own conditional writes: not writers of the state record.
PRIMITIVE_MODULES = {
    "adapters.cosmos.state_store",  # the primitives themselves, and the store's replace/create
    "adapters.cosmos.documents",  # deferral and health documents (their own ids, beside the records)
    "adapters.cosmos.order_store",  # the orders container
    "adapters.cosmos.deferral_store",
    "adapters.cosmos.health_store",
}

# Functions that only pass a write on: their callers are the writers.
PASS_THROUGH = {
    "activities.fencing.write_fenced": "every orchestration activity's fenced write",
    "activities.fencing._write_fenced": "write_fenced's write",
    "supervisor.owed.write_or_reread": "the supervisor's update_once_or_reread",
    "supervisor.owed._write_note": "a side note's write (OwedAlertSent, OwedStatusSent)",
    "notifications.received._say_and_clear": "Received said, its mark cleared (ReceivedSaid)",
    "notifications.received.say_received_first": "the same, before a status its caller sends",
    "notifications.received.say_before_the_last_word": "the same, after write_fenced's write ended the order well",
}

# Writers that cannot race another writer of the record, each with why.
EXCLUDED = {
    # The only create of a state record: nothing else writes a record that does not exist yet (nothing deletes
    # one), and two creates of the same order race on Cosmos DB's unique id (409, ``AlreadyExists``), which the
    # intake answers by reading the record that won and starting nothing (tests/submission/test_fast_path_claim.py,
    # test_a_delivery_that_loses_the_create_to_a_concurrent_one_starts_nothing).
    "submission.intake._create_state": "the record's create: no other writer before it exists",
    # The ops API's proof that it read the latest version before a verdict on that read alone: the version written
    # back unchanged, conditional on its _etag. It moves and loses nothing (test_redteam_two_writers.write_problems
    # passes it); a writer it races meets one 412 and reads again, as after any write; raced, it is the 412 itself.
    "operations.actions.read_is_latest": "the version read written back unchanged: nothing to race for",
}


def _modules(root: Path) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in SKIPPED_DIRS or rel.parts[0].startswith("."):
            continue
        yield ".".join(rel.with_suffix("").parts), ast.parse(path.read_text(), str(rel))


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _writes(node: ast.AST) -> bool:
    """Whether ``node`` is a write primitive named, called or passed on (``partial(update_once, ...)``)."""
    name = _name(node)
    if isinstance(node, ast.Attribute):
        if name in SDK_WRITES:
            return True
        if name in STORE_WRITES and _name(node.value) in STORE_NAMES:
            return True
    return name in PRIMITIVES


def functions(root: Path = ROOT) -> dict[str, set[str]]:
    """Every top-level function and method of the app (``module.function``, ``module.Class.method``; a nested
    function is its enclosing one's) -> the names it refers to, a write primitive as ``<write>``."""
    found: dict[str, set[str]] = defaultdict(set)
    for module, tree in _modules(root):
        for top in tree.body:
            owners: list[tuple[str, ast.AST]] = []
            if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
                owners = [(f"{module}.{top.name}", top)]
            elif isinstance(top, ast.ClassDef):
                methods = [m for m in top.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
                owners = [(f"{module}.{top.name}.{m.name}", m) for m in methods]
            for qual, fn in owners:
                for node in ast.walk(fn):
                    if isinstance(node, ast.Name | ast.Attribute):
                        found[qual].add("<write>" if _writes(node) else str(_name(node)))
        # a write at module level (a script's) belongs to no function: it is a writer of its own
        for stmt in tree.body:
            nodes = [] if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) else ast.walk(stmt)
            if any(_writes(n) for n in nodes if isinstance(n, ast.Name | ast.Attribute)):
                found[f"{module}.<module>"].add("<write>")
    return found


def writers(root: Path = ROOT) -> dict[str, str]:
    """Every writer of the state record -> the write (a primitive, ``<write>``, or the pass-through) it calls."""
    refs = functions(root)
    found: dict[str, str] = {}
    passed = {"<write>": "<write>"}  # a name whose callers write -> the function it names
    todo = ["<write>"]
    while todo:
        name = todo.pop()
        for fn, used in refs.items():
            if name not in used or any(fn.startswith(f"{module}.") for module in PRIMITIVE_MODULES):
                continue
            short = fn.rsplit(".", 1)[1]
            if fn in PASS_THROUGH:
                if short not in passed:
                    passed[short] = fn
                    todo.append(short)
            else:
                found.setdefault(fn, passed[name])
    return found


def scenes_of() -> dict[str, list[str]]:
    """Every act -> the record states the matrix runs it in (the outage scenes included)."""
    found: dict[str, list[str]] = defaultdict(list)
    for scene, (_, acts) in lost_write_races.ALL_SCENES.items():
        for act in acts:
            found[act].append(scene)
    return found


def test_every_writer_of_the_state_record_is_in_the_matrix() -> None:
    found = writers()
    covered = set().union(*COVERS.values())
    missing = {fn: via for fn, via in found.items() if fn not in covered and fn not in EXCLUDED}
    assert not missing, (
        "writers of the state record no act of the two-writers matrix runs (declare one with @covers in "
        f"tests/supervisor/two_writers.py, or exclude it here saying why it cannot race): {missing}"
    )
    # no stale declaration: what an act covers, and what is excluded or passed through, is a writer in the code
    assert not (covered | set(EXCLUDED)) - set(found), (covered | set(EXCLUDED)) - set(found)
    refs = functions()
    assert not [fn for fn in PASS_THROUGH if fn not in refs], "a pass-through that is not in the code"
    # every act declares what it covers, and the matrix runs it in some record state
    assert set(WRITERS) == set(COVERS), set(WRITERS) ^ set(COVERS)
    assert not set(WRITERS) - set(scenes_of()), set(WRITERS) - set(scenes_of())
    print(f"{len(found)} writers: {len(found) - len(EXCLUDED)} in the matrix, {len(EXCLUDED)} excluded")


def test_the_inventory_finds_a_writer_it_was_not_told_of(tmp_path: Path) -> None:
    """The scan itself, on a package of its own: a primitive called, passed on, or reached through a
    pass-through; a store's replace; the SDK's upsert; a method; a nested function (its enclosing one's)."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "w.py").write_text(
        "from functools import partial\n"
        "def direct(s, r):\n    return update_once(s, r, f)\n"
        "def passed(s):\n    return partial(update_fenced, s)\n"
        "def via(ctx):\n    return _write_note(ctx, 1, 2, 3)\n"
        "def replaced(ctx, r):\n    ctx.states.replace(r)\n"
        "def upserted(c, d):\n    c.upsert_item(d)\n"
        "class K:\n    def m(self, r):\n        def inner():\n            self.store.create(r)\n        inner()\n"
        "def reads(ctx, r):\n    return ctx.states.get(r) or r.replace('a', 'b')\n"
    )
    (tmp_path / "supervisor").mkdir()
    (tmp_path / "supervisor" / "owed.py").write_text("def _write_note(ctx, r, n, d):\n    update_once(ctx, r, n)\n")
    assert set(writers(tmp_path)) == {
        "app.w.direct",
        "app.w.passed",
        "app.w.via",
        "app.w.replaced",
        "app.w.upserted",
        "app.w.K.m",
    }
    assert writers(tmp_path)["app.w.via"] == "supervisor.owed._write_note"


class _Entered:
    """The functions of the app entered while active (``co_qualname``, module-qualified)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            self.names.add(f"{module}.{frame.f_code.co_qualname}")


@pytest.mark.cosmos
def test_every_act_reaches_the_writers_it_declares(cosmos_db: Any, clock: Any) -> None:
    """Each act, alone, in the record states the matrix gives it (in its order, until it has entered all it declares:
    ``client_cancel`` reaches ``_tell_rejected`` only where the cancellation is rejected)."""
    unreached: dict[str, set[str]] = {}
    n = 0
    for act, declared in sorted(COVERS.items()):
        missing = set(declared)
        for scene_name in scenes_of()[act]:
            n += 1
            run = Run(cosmos_db, clock, f"cover{n}")
            scene = setup(run, scene_name) if scene_name in SCENES else lost_write_races.setup(run, scene_name)
            ctx, _ = run.ctx("A", 1)
            entered = _Entered()
            sys.setprofile(entered)
            try:
                WRITERS[act](ctx, run.order_id, scene)
            finally:
                sys.setprofile(None)
            missing -= entered.names
            if not missing:
                break
        if missing:
            unreached[act] = missing
    assert not unreached, f"acts that never reached what they declare, in any record state of theirs: {unreached}"
