"""The runner's model of Session consistency across instances (``localrun/stale_reads.py``, profile
``cosmos.stale_read_rate``): a client reads its own writes, never a version older than one it has seen in that
partition, never one not written yet, and everyone reads the latest once the lag has passed."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from localrun.profile import Profile, ProfileError
from localrun.stale_reads import LEFT_OUT, StaleReads

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY, PART = ("state", "o1"), ("state", "o1")
OTHER_KEY = ("deferral", "o1")  # another document of the same partition


class World:
    def __init__(self, rate: float = 1.0) -> None:
        self.now = T0
        self.client: object = "writer"
        self.injected: Counter[str] = Counter()
        self.reads = StaleReads(
            rate, timedelta(seconds=2), random.Random(1), lambda: self.now, self.client_of, self.injected
        )

    def client_of(self) -> object:
        return self.client

    def write(self, key: tuple[str, str], tag: str, heard: bool = True) -> None:
        self.reads.wrote(key, PART, tag, tag)
        if heard:
            self.reads.heard(key, PART, tag)

    def read(self, key: tuple[str, str] = KEY, current: str | None = None) -> object:
        return self.reads.read(key, PART, current, current)


class Client:
    """A hashable, weak-referenceable client (the runner's are the scheduler's tasks)."""


def test_the_writer_reads_its_own_write_and_another_client_may_not():
    w = World()
    writer, reader = Client(), Client()
    w.client = writer
    w.write(KEY, "v1")
    assert w.read(current="v1") == "v1"
    w.client = reader
    assert w.read(current="v1") is None  # a 404: the replica has not got the create
    w.client = writer
    w.write(KEY, "v2")
    w.client = reader
    assert w.read(current="v2") == "v1"  # the version before, never older than what it saw
    assert w.injected["cosmos_stale_reads"] == 2


def test_a_client_never_reads_older_than_it_has_seen_in_the_partition():
    w = World()
    writer, reader = Client(), Client()
    w.client = writer
    w.write(KEY, "v1")
    w.client = reader
    w.write(OTHER_KEY, "d1")  # its own write, after v1 in the partition: a replica with it has v1
    assert w.read(current="v1") == "v1"
    w.client = writer
    w.write(KEY, "v2")
    w.client = reader
    assert w.read(current="v2") == "v1"
    w.client = writer
    w.write(KEY, "v3")
    w.client = reader
    assert w.read(current="v3") == "v2"  # one write behind, never back to v1


def test_everyone_reads_the_latest_once_the_lag_has_passed():
    w = World()
    w.client = Client()
    w.write(KEY, "v1")
    w.now += timedelta(seconds=2)
    w.client = Client()
    assert w.read(current="v1") == "v1"


def test_a_write_whose_response_was_lost_is_not_in_its_writers_session():
    w = World()
    w.client = writer = Client()
    w.write(KEY, "v1", heard=False)
    assert w.read(current="v1") is None
    w.client = writer
    assert w.read(current="v1") is None  # still: the reads of one client are monotonic, and it never saw v1


def test_a_document_not_written_through_the_runner_is_read_as_cosmos_answered():
    w = World()
    w.client = Client()
    assert w.read(current="v9") == "v9"
    assert w.read(current=None) is None


def test_a_query_leaves_out_a_record_just_created_and_serves_an_older_version_only_when_it_matches_too():
    w = World()
    w.client = Client()
    w.write(KEY, "v1")
    w.client = Client()
    assert w.reads.queried(KEY, PART, "v1", "v1", lambda _old, _new: True) is LEFT_OUT
    w.client = Client()
    w.write(KEY, "v2")
    w.client = Client()
    assert w.reads.queried(KEY, PART, "v2", "v2", lambda _old, _new: True) == "v1"
    w.client = Client()
    assert w.reads.queried(KEY, PART, "v2", "v2", lambda _old, _new: False) == "v2"


def test_the_profile_keys():
    profile = Profile.parse({"cosmos": {"stale_read_rate": 0.5, "stale_read_lag_ms": 250}})
    assert (profile.cosmos_stale_read_rate, profile.cosmos_stale_read_lag_ms) == (0.5, 250.0)
    assert Profile().cosmos_stale_read_rate == 0
    for bad in (0, -1, 60_001, "1", True):
        with pytest.raises(ProfileError, match="stale_read_lag_ms"):
            Profile.parse({"cosmos": {"stale_read_rate": 0.1, "stale_read_lag_ms": bad}})
    with pytest.raises(ProfileError, match="stale_read_rate"):
        Profile.parse({"cosmos": {"stale_read_rate": 2}})
