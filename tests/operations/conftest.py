"""Fixtures the ops API tests share: a harness with a local operator principal (``ops``) and one as on
App Service with authentication on (``easy_auth``); headless Chromium for the console's tests (``browser``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from localrun.browser import LAUNCH_ARGS, MISSING, chromium_path
from tests.operations.harness import OPERATOR, OpsHarness


@pytest.fixture
def ops(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = OpsHarness(cosmos_db, OPS_LOCAL_PRINCIPAL=OPERATOR)
    yield made
    made.close()


@pytest.fixture
def easy_auth(cosmos_db: Any) -> Iterator[OpsHarness]:
    """As on App Service with authentication on: the platform sets WEBSITE_AUTH_ENABLED."""
    made = OpsHarness(cosmos_db, WEBSITE_AUTH_ENABLED="True", WEBSITE_SITE_NAME="orders-app")
    yield made
    made.close()


@contextmanager
def launched_chromium() -> Iterator[Any]:
    """Headless Chromium (Debian's, driven by Playwright: browser/test_console_browser.py); without it the test
    FAILS saying what to install. While it is open Playwright's sync API keeps its event loop running in this
    thread: ``asyncio.run`` refuses to start beside it (tests/operations/test_review_answer_delivery.py)."""
    executable = chromium_path()
    if executable is None:
        pytest.fail(MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=LAUNCH_ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


class Pages:
    """What a test's ``browser`` gives: ``new_page`` as Playwright's ``Browser.new_page``, each page in a new
    browser context of its own (no cookie, storage, cache or route shared with another page, another test's
    included); every page the test opened is closed with its context when the test ends."""

    def __init__(self, browser: Any) -> None:
        self._browser = browser
        self._pages: list[Any] = []

    def new_page(self, **options: Any) -> Any:
        page = self._browser.new_page(**options)
        self._pages.append(page)
        return page

    def close(self) -> None:
        for page in self._pages:
            page.context.close()  # a page of Browser.new_page owns its context


@pytest.fixture
def browser() -> Iterator[Pages]:
    """A Chromium of the test's own, for the few browser tests among this folder's others; those of
    ``browser/`` share one (its conftest)."""
    with launched_chromium() as launched:
        pages = Pages(launched)
        yield pages
        pages.close()
