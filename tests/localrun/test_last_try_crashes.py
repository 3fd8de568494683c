"""``host.last_try_crash_rate``: a last try (``lastTry``) whose worker process is gone before its code runs, as the
Durable extension reports it (the activity's ``TaskFailed``), for the end-to-end check that such a status is paged
(``LastTryLost``) and not counted missing (docs/local-runner.md)."""

from __future__ import annotations

import random

import pytest

from localrun.hostile import last_try_crashes
from localrun.profile import Profile, ProfileError


def test_the_profile_reads_the_rate_and_refuses_one_that_is_no_probability() -> None:
    assert Profile.parse({"host": {"last_try_crash_rate": 0.5}}).last_try_crash_rate == 0.5
    assert Profile.parse({}).last_try_crash_rate == 0.0
    with pytest.raises(ProfileError, match="last_try_crash_rate"):
        Profile.parse({"host": {"last_try_crash_rate": 2}})


def test_only_a_last_try_crashes_and_only_it_draws() -> None:
    rng = random.Random(1)
    assert not any(last_try_crashes({"orderId": "o1", "lastTry": None}, rng, 1.0) for _ in range(10))
    assert not last_try_crashes(None, rng, 1.0)
    assert rng.random() == random.Random(1).random()  # nothing drawn for those
    assert all(last_try_crashes({"lastTry": True}, rng, 1.0) for _ in range(10))
    assert not any(last_try_crashes({"lastTry": True}, rng, 0.0) for _ in range(10))
