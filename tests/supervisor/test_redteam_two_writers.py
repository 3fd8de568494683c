"""Red team: two writers of one state record, at every interleaving of one's read and the other's write.

For a pair of writers (A, B) of a record state both may act in (``two_writers.SCENES``), A reads; after its
k-th read (or write) of the record B makes its whole write; then A goes on with a version that is stale, and
must read again and decide again, or give up cleanly. A fenced writer starts from what its process holds
(``StateStore.recent``): the version its previous write returned, nothing (a restarted worker), or B's own
write (B ran in the same process). The final record must be one a serial order could make (B then A;
or B alone, when A gave up without writing; or A then B), and every write of the run must keep to the design's
transitions table, to the fences (a fenced writer writes only over a version its instance holds, a side note
aside), and to every history entry of the version it replaced (so no side note submission wrote is lost); what A
sent (statuses, alerts, agent requests) must be what it sends in a serial order.

Every write must also leave the record somebody can move on (``_stranded``): no ``Pending`` locked, no
``Processing`` or ``Compensating`` without the ``completeBy`` the supervisor finds it by.

Generative and seeded: ``TWO_WRITERS_SEED`` (default 1) shuffles the pairs, ``TWO_WRITERS_PAIRS`` bounds how many
run (default 150, about 20 s, every writer among them as A and as B and every record state: ``sampled``; ``all``:
every pair, 1,577 and about 3 minutes), and each pair runs at each of A's reads and writes up to
``TWO_WRITERS_READS`` (default 3). The matrix covers every writer of the record in the code
(``test_two_writers_cover.py``). ``TWO_WRITERS_SCENES`` (names, comma-separated) keeps
those record states only; ``TWO_WRITERS_TRACE`` prints every case's answers."""

from __future__ import annotations

import difflib
import itertools
import os
import random
from dataclasses import replace
from typing import Any

import pytest

from domain import transitions
from domain.jsonvalues import Invalid
from domain.records import SIDE_NOTES
from domain.states import ProcessState
from tests.supervisor.two_writers import CACHED, CACHES, FENCED, T0, Case, Outcome, Run, all_pairs, interleaved, serial

pytestmark = pytest.mark.cosmos

P, PR, E = ProcessState.PENDING, ProcessState.PROCESSING, ProcessState.ERROR
C, CF = ProcessState.COMPENSATING, ProcessState.COMPENSATION_FAILED
# docs/design.md, "State machine": every move the code makes
MOVES = {
    (P, PR),
    (PR, PR),
    (PR, ProcessState.PROCESSED),
    (PR, P),
    (PR, E),
    (E, P),
    (P, C),
    (PR, C),
    (E, C),
    (CF, C),
    (C, C),
    (C, ProcessState.COMPENSATED),
    (C, CF),
}
# a write that moves nothing: a side note, or the supervisor acknowledging the notifications a failure owed
NOT_A_MOVE = SIDE_NOTES | {"NotificationsDelivered"}


def _added(base_history: list[Any], new_history: list[Any]) -> list[Any]:
    """The entries a write added (the history is bounded: the base's tail is where the new history begins)."""
    for cut in range(len(base_history) + 1):
        kept = base_history[cut:]
        if new_history[: len(kept)] == kept:
            return new_history[len(kept) :]
    return new_history


def _stranded(record: Any) -> str | None:
    """Why nobody can move ``record`` on, if so: an owner nobody can take it from (no deadline the supervisor finds
    it past), or a record unowned in a state only an owner moves with no time the starter or supervisor acts at."""
    state = record.process_state
    if state is P and record.locked_by is not None:
        return f"Pending yet locked by {record.locked_by!r} (the starter claims only unlocked records)"
    if state in (PR, C) and record.complete_by is None:
        return f"{state} with no completeBy (lockedBy {record.locked_by!r}): the supervisor never finds it due"
    return None


def write_problems(outcome: Outcome, run: str, fenced: dict[str, bool]) -> list[str]:
    found: list[str] = []
    for w in outcome.audit.writes:
        if w.base is None or w.writer == "setup":  # the scene's own making
            continue
        before, after = w.base.process_state, w.new.process_state
        added = _added(w.base.history, w.new.history)
        if replace(w.new, version=None) == replace(w.base, version=None):
            continue  # the version read written unchanged (``read_is_latest``): it moves nothing and loses nothing
        if not added:
            found.append(f"{run}: {w.writer} replaced a version without a history entry of its own")
        moves = [e.event for e in added if e.event not in NOT_A_MOVE]
        if before is after and before not in (PR, C) and moves:
            found.append(f"{run}: {w.writer} moved {before} -> {after} by {moves}, outside the table")
        if before is not after and (before, after) not in MOVES:
            found.append(f"{run}: {w.writer} moved {before} -> {after} ({[e.event for e in added]}), outside the table")
        lost = [e.event for e in w.base.history[-5:] if e not in w.new.history]
        if lost:
            found.append(f"{run}: {w.writer}'s write lost the entries {lost} of the version it replaced")
        if w.base.payment is not None and w.new.payment != w.base.payment:
            found.append(f"{run}: {w.writer}'s write lost the applied payment notification")
        owner = outcome.owner if fenced.get(w.writer) else None
        if owner is not None and moves and w.base.locked_by != owner:
            found.append(f"{run}: {w.writer} ({owner}) wrote {moves} over a version locked by {w.base.locked_by!r}")
        stranded = _stranded(w.new)
        if stranded:
            found.append(f"{run}: {w.writer}'s write left the record {stranded}")
        if w.base.received_owed is not None and w.new.received_owed is None:
            said = [m for q, m in outcome.sender.sent if m.message_id == f"{outcome.order_id}:Received:0"]
            if not said:
                found.append(f"{run}: {w.writer} cleared the Received owed without saying it")
    return found


def _diff(one: str, other: str) -> str:
    lines = difflib.unified_diff(one.split(", "), other.split(", "), lineterm="", n=0)
    return " | ".join(line for line in lines if not line.startswith(("---", "+++", "@@")))[:1500]


def judge(case: Case, inter: Outcome, ab: Outcome, ba: Outcome, b_alone: Outcome, fenced: dict[str, bool]) -> list[str]:
    found = write_problems(inter, case.name, fenced)
    serialisable = (
        (inter.document == ba.document and inter.a_wrote == ba.a_wrote)
        or (inter.document == b_alone.document and not inter.a_wrote)
        or inter.document == ab.document
    )
    if serialisable and inter.a_wrote and ba.a_wrote and inter.document == ba.document:
        mine, theirs = (str(o.a).replace(o.order_id, "ORDER") for o in (inter, ba))
        if mine != theirs:
            found.append(f"{case.name}: A answered {mine!r}, after B alone it answers {theirs!r}")
    told = inter.a_sent - ab.a_sent - ba.a_sent
    if told:
        found.append(f"{case.name}: A sent {sorted(told)}, which it sends in no serial order")
    if not serialisable:
        found.append(
            f"{case.name}: A {inter.a!r} B {inter.b!r} (serially B then A: A {ba.a!r}, wrote {ba.a_wrote}); "
            f"the final record is no serial order's; against B then A: {_diff(ba.document, inter.document)}"
        )
    return found


SEED = int(os.environ.get("TWO_WRITERS_SEED", "1"))
PAIRS = os.environ.get("TWO_WRITERS_PAIRS", "150")
READS = int(os.environ.get("TWO_WRITERS_READS", "3"))


def sampled(pairs: list[tuple[str, str, str]], size: int) -> list[tuple[str, str, str]]:
    """``size`` of the (shuffled) pairs, every writer among them as A and as B, and every record state: first, in
    their order, each pair that brings one not yet there, then the rest in their order."""
    wanted = {("scene", s) for s, _, _ in pairs} | {("A", a) for _, a, _ in pairs} | {("B", b) for _, _, b in pairs}
    first: list[tuple[str, str, str]] = []
    for pair in pairs:
        brings = {("scene", pair[0]), ("A", pair[1]), ("B", pair[2])} & wanted
        if brings:
            first.append(pair)
            wanted -= brings
    rest = [pair for pair in pairs if pair not in first]
    return (first + rest)[: max(size, len(first))]


def test_two_writers_of_one_record_at_every_interleaving(cosmos_db: Any, clock: Any) -> None:
    pairs = list(all_pairs())
    random.Random(SEED).shuffle(pairs)
    if os.environ.get("TWO_WRITERS_SCENES"):
        pairs = [p for p in pairs if p[0] in os.environ["TWO_WRITERS_SCENES"].split(",")]
    if PAIRS != "all":
        pairs = sampled(pairs, int(PAIRS))
    found: list[str] = []
    stats = {"pairs": len(pairs), "interleavings": 0, "b_between": 0, "b_wrote": 0, "a_rewrote": 0, "a_gave_up": 0}
    stats["b_never_came"] = 0
    for n, (scene, a, b) in enumerate(pairs):
        case = Case(scene, a, b, 0)
        ab, a_alone = serial(Run(cosmos_db, clock, f"tw{n}-ab"), case, a_first=True)
        ba, b_alone = serial(Run(cosmos_db, clock, f"tw{n}-ba"), case, a_first=False)
        fenced = {"A": a in FENCED, "B": b in FENCED}
        found += write_problems(ab, case.name + " (A then B)", fenced)
        found += write_problems(ba, case.name + " (B then A)", fenced)
        for k, cache in itertools.product(range(1, min(a_alone.a_reads, READS) + 1), CACHES):
            if cache != "own" and a not in CACHED:
                continue
            at_k = Case(scene, a, b, k, cache)
            inter = interleaved(Run(cosmos_db, clock, f"tw{n}-i{k}{cache}"), at_k)
            if inter.b is None:  # A read less in this cache than in its own (a cold late run): B never came in
                stats["b_never_came"] += 1
                continue
            found += judge(at_k, inter, ab, ba, b_alone, fenced)
            stats["interleavings"] += 1
            stats["b_between"] += inter.b is not None
            b_wrote = any(w.writer == "B" for w in inter.audit.writes)
            stats["b_wrote"] += b_wrote
            stats["a_rewrote"] += b_wrote and inter.a_wrote
            stats["a_gave_up"] += b_wrote and not inter.a_wrote and ba.a_wrote
            if os.environ.get("TWO_WRITERS_TRACE"):
                print(at_k.name, "A:", inter.a, "B:", inter.b, "A wrote:", inter.a_wrote, "BA:", ba.a, ba.a_wrote)
    print(stats)
    assert not found, "\n".join(found)
    # the harness itself: B ran between A's read and A's write in every case, and wrote in most
    assert stats["b_between"] == stats["interleavings"] > 0
    assert stats["b_wrote"] > stats["interleavings"] // 2


def test_a_retired_attempt_releases_the_step_the_record_has_in_flight(cosmos_db: Any, clock: Any) -> None:
    """Found by the generative test: ``settle_retired_attempt`` named the step of its first read in the release's
    history, and kept it when a late run of the instance's own ``begin_step`` (at least once) moved the record on
    between that read and the write: the release, read again on the 412, said ``reserve-inventory`` while the
    record had ``charge-payment`` in flight."""
    case = Case("running", "retired_settle", "begin_next", 1)
    ba, _ = serial(Run(cosmos_db, clock, "retired-ba"), case, a_first=False)
    inter = interleaved(Run(cosmos_db, clock, "retired-i1"), case)

    assert inter.record is not None and ba.record is not None
    released = inter.record.history[-1]
    assert (released.event, released.detail) == ("StepTransientFailure", "charge-payment: superseded by an upgrade")
    assert inter.document == ba.document


def test_a_record_nobody_can_move_on_is_told() -> None:
    """The harness itself: ``_stranded`` names an owned state with no deadline; a Pending record locked is one no
    record can be any more (``StateRecord`` refuses it: its document does not map)."""
    record = transitions.new_record("o-1", "client-statuses", T0)
    assert _stranded(record) is None
    with pytest.raises(Invalid, match="expected null on a Pending record"):
        replace(record, locked_by="o-1:1")
    held = replace(record, process_state=PR, locked_by="o-1:1", complete_by=None)
    assert "no completeBy" in str(_stranded(held))
    assert _stranded(replace(held, complete_by=T0)) is None
