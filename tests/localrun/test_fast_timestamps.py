"""``localrun.durable.fast_timestamps`` reads every timestamp form the Durable extension and this
runner write to the instant the SDK's own ``dateutil`` parser reads, and hands anything else to it.
The SDK's module is put back after each test: the replay tests run the SDK as shipped."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from dateutil.parser import parse as dateutil_parse

from localrun.durable import fast_timestamps

FORMS = [
    "2026-12-05T05:00:05Z",  # the extension: a whole second, the zeros dropped
    "2026-12-05T05:00:05.5Z",
    "2026-12-05T05:00:05.1234567Z",  # the extension's seven digits
    "2026-12-05T05:00:05.9999999Z",
    "2026-12-05T05:00:05.123456Z",  # this runner
    "2026-12-05T07:00:05.5+02:00",  # not ``Z``: dateutil's
    "Dec 5 2026 05:00:05 UTC",  # nothing ISO: dateutil's
]


@pytest.fixture
def fast_parse(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    module = importlib.import_module("azure.durable_functions.models.history.HistoryEvent")
    monkeypatch.setattr(module, "dt_parse", module.dt_parse)  # put back after the test
    monkeypatch.setattr(fast_timestamps, "_installed", False)
    fast_timestamps.install()
    parse: Callable[..., Any] = module.dt_parse
    return parse


@pytest.mark.parametrize("text", FORMS)
def test_each_form_reads_to_the_instant_dateutil_reads(fast_parse: Callable[..., Any], text: str) -> None:
    fast: datetime = fast_parse(text)
    assert fast == dateutil_parse(text)
    assert fast.utcoffset() == dateutil_parse(text).utcoffset()


def test_the_sdk_module_is_patched_only_by_install(fast_parse: Callable[..., Any]) -> None:
    assert fast_parse is not dateutil_parse
