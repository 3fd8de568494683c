"""The Cosmos mapping of a record's version, and the conditional re-apply loop, without Cosmos."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from adapters.cosmos.documents import stored, update_conditionally
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


def update(log: RacingLog, attempts: int = 5) -> tuple[DeferralDocument, str]:
    return update_conditionally(
        read=lambda: log.doc,
        fresh=lambda: DeferralDocument.empty("o-1", NOW),
        change=lambda base: (replace(base, rejected_at=NOW), "changed"),
        unchanged=lambda current, _base, updated: current is not None and updated == current,
        save=log.save,
        what="deferral document of o-1",
        attempts=attempts,
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
