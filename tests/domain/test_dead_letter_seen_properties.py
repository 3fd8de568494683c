"""What the dead-letter watch keeps as seen (domain/dead_letters.py), checked on random histories of a subqueue: each
dead letter is logged once, at the first read that reaches it, however the subqueue changes between reads (numbers
dead-lettered below those logged, operators taking any, more waiting than one read reaches).

A read is the watch's (supervisor/dead_letters.py ``_waiting``): the lowest ``scan`` numbers waiting, and the number
it read up to when more wait (None: all were read)."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime

import pytest

from domain.dead_letters import DeadLetterCursor, SeenRange, ranges_of

NOW = datetime(2026, 12, 5, tzinfo=UTC)


@pytest.mark.parametrize("seed", range(200))
def test_ranges_of_is_the_set_as_the_fewest_ranges(seed: int) -> None:
    rng = random.Random(seed)
    numbers = {rng.randrange(1, 60) for _ in range(rng.randrange(0, 40))}
    ranges = ranges_of(rng.sample(sorted(numbers), len(numbers)) * 2)  # any order, repeats
    assert {n for r in ranges for n in range(r.first, r.last + 1)} == numbers
    assert all(r.first <= r.last for r in ranges)
    assert all(a.last + 1 < b.first for a, b in itertools.pairwise(ranges))  # ordered, apart


def _read(waiting: set[int], scan: int) -> tuple[list[int], int | None]:
    lowest = sorted(waiting)[:scan]
    return lowest, (lowest[-1] if len(lowest) == scan else None)


@pytest.mark.parametrize("seed", range(300))
def test_each_dead_letter_is_logged_once_at_the_first_read_that_reaches_it(seed: int) -> None:
    rng = random.Random(seed)
    scan = rng.choice([1, 2, 3, 5, 8])
    queue = list(range(1, 400))  # the queue's numbers, handed out in any order (deferred, redelivered...)
    rng.shuffle(queue)
    waiting: set[int] = set()
    logged: dict[int, int] = {}
    seen = DeadLetterCursor.fresh("q", NOW)
    for _ in range(60):
        for _ in range(rng.randrange(0, 6)):  # dead-lettered since the last read
            if queue:
                waiting.add(queue.pop())
        for n in rng.sample(sorted(waiting), rng.randrange(0, min(len(waiting), 4) + 1)):  # an operator takes some
            waiting.discard(n)
        read, up_to = _read(waiting, scan)
        for n in seen.new_of(read):
            logged[n] = logged.get(n, 0) + 1
        assert all(n in logged for n in read)  # every number the read reached: logged now or before
        seen = seen.seeing(read, up_to, NOW)
    assert all(count == 1 for count in logged.values()), {n: c for n, c in logged.items() if c > 1}


def test_seen_beyond_a_partial_read_is_kept_and_below_it_only_what_waits() -> None:
    seen = DeadLetterCursor.fresh("q", NOW).seeing([1, 3, 5, 7, 9], None, NOW)
    assert seen.seen == [SeenRange(n, n) for n in (1, 3, 5, 7, 9)]
    kept = seen.seeing([2, 3, 4], 4, NOW)  # a read reached 4: 1 is gone, 5 to 9 beyond it stay
    assert kept.seen == [SeenRange(2, 5), SeenRange(7, 7), SeenRange(9, 9)]
    assert kept.new_of([2, 3, 4, 5, 6]) == [6]
    assert seen.seeing([1, 3, 5, 7, 9], None, NOW) is seen  # nothing changed: nothing to write
