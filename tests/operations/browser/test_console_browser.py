"""The console in real headless Chromium against ``python -m localrun serve``: it finds an order
waiting for review, answers it with the keyboard (reason, decision, confirmation) and sees the order
move on. Screenshots of the overview and of the order go to ``out/``.

Chromium is Debian's ``chromium`` package (``python3 dev.py setup`` installs it); without it this
test FAILS saying what to install (localrun.browser.MISSING)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROFILE = Path(__file__).parent.parent / "review-profile.json"
OUT = ROOT / "out"


@pytest.fixture
def served() -> Iterator[str]:
    """``localrun serve`` on a free port; yields the console's URL, stops the server afterwards."""
    command = [
        sys.executable,
        *("-m", "localrun", "serve", "--orders", "12", "--seed", "5", "--faults", str(PROFILE)),
        *("--speed", "20", "--port", "0", "--no-progress"),
    ]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 120
        url = None
        while url is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            match = re.search(r"console: (http://127\.0\.0\.1:\d+/api/ops/console)", line)
            url = match.group(1) if match else None
        assert url is not None, f"localrun serve printed no console URL (exit {process.poll()})"
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def test_an_operator_answers_a_review_in_the_console_and_the_order_moves_on(served, browser):
    from playwright.sync_api import expect

    OUT.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith("http://127.0.0.1") else None)
    page.goto(served)
    expect(page.get_by_role("heading", name=re.compile("Waiting for review"))).to_be_visible()

    # every control has a label (accessibility)
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, select, textarea')].filter(e => !e.labels.length).length"
    )
    assert unlabelled == 0

    review_link = page.locator("#reviews a").first
    expect(review_link).to_be_visible(timeout=90_000)
    # the overview says what each waiting order takes if nobody answers (the summary's defaultAction)
    expect(page.locator("#reviews")).to_contain_text("Without an answer")
    default_cell = page.locator("#reviews tbody tr").first.locator("td").nth(2)  # after Order, Decide by
    expect(default_cell).to_have_text(re.compile(r"^(retry|alternative|compensate|fail)$"))
    page.screenshot(path=str(OUT / "console.png"), full_page=False)
    order_id = review_link.inner_text()
    review_link.focus()
    page.keyboard.press("Enter")  # keyboard only from here on

    expect(page.get_by_role("heading", name=f"Order {order_id}")).to_be_visible()
    expect(page.locator("#order-facts")).to_contain_text("waiting for review")
    page.get_by_label("Reason (required, recorded with your name)").fill("card blocked by the bank")
    page.get_by_label("Fail the order").check()
    page.get_by_role("button", name="Answer review").focus()
    page.keyboard.press("Enter")
    confirm = page.get_by_role("button", name="Confirm")
    expect(confirm).to_be_focused()
    expect(page.locator("#confirm-text")).to_contain_text("fail")
    page.keyboard.press("Enter")

    expect(page.get_by_role("status")).to_contain_text("Done: review", timeout=30_000)
    expect(page.locator("#timeline")).to_contain_text("ReviewAnswered by developer@localhost")
    expect(page.locator("#order-facts")).to_contain_text("Error", timeout=60_000)
    expect(page.locator("#btn-resubmit")).to_be_visible()
    page.screenshot(path=str(OUT / "console-order.png"), full_page=True)
    assert outside == [], f"the console fetched from elsewhere: {outside}"
