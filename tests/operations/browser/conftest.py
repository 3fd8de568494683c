"""The console's tests in headless Chromium share one (``chromium``): a launch and its Playwright driver cost about
1.2 s of CPU, once per test before (35 tests here). Apart from the folder's other tests: while it is open Playwright
keeps its event loop running in the thread, where ``asyncio.run`` refuses to start (``launched_chromium``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.operations.conftest import Pages, launched_chromium


@pytest.fixture(scope="package")
def chromium() -> Iterator[Any]:
    with launched_chromium() as launched:
        yield launched


@pytest.fixture
def browser(chromium: Any) -> Iterator[Pages]:
    """The test's pages on the folder's Chromium, each in a browser context of its own, closed after the test."""
    pages = Pages(chromium)
    yield pages
    pages.close()
