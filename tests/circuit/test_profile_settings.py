"""Profile key ``settings``: app settings a simulation runs with (e.g. MAX_OUTAGE_WAIT_MINUTES)."""

from __future__ import annotations

import pytest

from localrun import hostile
from localrun.profile import Profile, ProfileError


def test_a_profile_overrides_app_settings_by_name():
    profile = Profile.parse({"settings": {"MAX_OUTAGE_WAIT_MINUTES": "0"}, "admission": {"max_pending": 5}})
    assert hostile.app_settings(profile) == {"MAX_OUTAGE_WAIT_MINUTES": "0", "MAX_PENDING": "5"}


def test_an_unknown_setting_or_a_non_string_value_is_refused():
    with pytest.raises(ProfileError, match="NOT_A_SETTING"):
        Profile.parse({"settings": {"NOT_A_SETTING": "1"}})
    with pytest.raises(ProfileError, match="must be a string"):
        Profile.parse({"settings": {"MAX_OUTAGE_WAIT_MINUTES": 0}})
