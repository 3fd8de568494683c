"""The Cosmos mapping of a record's version, and the conditional re-apply loop, without Cosmos."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.cosmos.documents import RACE_PAUSE_MAX_S, RacePause, stored, update_conditionally
from adapters.cosmos.errors import AlreadyExists, ConcurrencyExhausted, EtagMismatch
from adapters.cosmos.mapping import to_document
from domain.deferral import DeferralDocument

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_stored_record_carries_the_items_etag_as_its_version_and_never_writes_it_back():
    doc = to_document(DeferralDocument.empty("o-1", NOW))
    record = stored(DeferralDocument, {**doc, "_etag": '"0a1"', "_ts": 1})
    assert record.version == '"0a1"'
    assert "version" not in to_document(record) and "_etag" not in to_document(record)


class RacingLog:
    """Loses the first ``losses`` writes the way Cosmos does: 409 for a create, 412 for a replace."""

    def __init__(self, losses: int) -> None:
        self.doc: DeferralDocument | None = None
        self.losses = losses
        self.writes: list[str | None] = []  # the version each write was conditional on

    def save(self, doc: DeferralDocument) -> DeferralDocument:
        self.writes.append(doc.version)
        if self.losses:
            self.losses -= 1
            raise AlreadyExists("409") if doc.version is None else EtagMismatch("412")
        self.doc = replace(doc, version=f"v{len(self.writes)}")
        return self.doc


def update(log: RacingLog, attempts: int = 5, pause: Any = None) -> tuple[DeferralDocument, str]:
    return update_conditionally(
        read=lambda: log.doc,
        fresh=lambda: DeferralDocument.empty("o-1", NOW),
        change=lambda base: (replace(base, rejected_at=NOW), "changed"),
        unchanged=lambda current, _base, updated: current is not None and updated == current,
        save=log.save,
        what="deferral document of o-1",
        attempts=attempts,
        pause=pause,
    )


def test_a_lost_race_is_read_and_applied_again_on_the_version_read():
    log = RacingLog(losses=2)
    written, result = update(log)
    assert (written.version, result) == ("v3", "changed")
    assert log.writes == [None, None, None]  # each try a create: nothing was stored yet
    again, _ = update(log)  # stored now: a replace on the version read, and nothing to change
    assert again is log.doc and log.writes == [None, None, None]


def test_it_gives_up_after_the_attempts_naming_what_it_wrote():
    with pytest.raises(ConcurrencyExhausted, match="deferral document of o-1: 3 races in a row"):
        update(RacingLog(losses=3), attempts=3)


class Ceiling(random.Random):
    """Draws the top of every range: the pause ``RacePause`` takes at most."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_after_each_lost_race_a_random_pause_whose_ceiling_doubles_up_to_its_cap_and_none_before_the_first_try():
    slept: list[float] = []
    log = RacingLog(losses=8)
    update(log, attempts=9, pause=RacePause(slept.append, Ceiling()))
    assert slept == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.32, 0.32]  # never before the first read
    assert max(slept) == RACE_PAUSE_MAX_S
    spread: list[float] = []
    pause = RacePause(spread.append, random.Random(7))
    for _ in range(200):
        pause(3)
    assert 0 <= min(spread) < 0.005 and 0.035 < max(spread) <= 0.04  # anywhere below the ceiling (full jitter)
