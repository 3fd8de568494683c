"""An operator's review answer while the Durable extension does not answer (on Azure, a stalled storage
backend behind the host's webhook): the SDK's client waits up to 240 s (its aiohttp session's total timeout),
past the 230 s the front end gives an HTTP-triggered function, so the operator got the front end's timeout and
no word of the answer's fate. Each Durable call the request makes is now bounded
(``settings.DURABLE_CALL_TIMEOUT``, shortened here): a raise that does not come back is a delivery the app
cannot confirm, said as such (503, noted: post the same answer again), and a stalled status read is a 503.
The stall is the runner's hook at its HTTP edge (``DurableExtensionApi.before_answer``), below the real client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from adapters import durable_client
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos

STALL = 8.0  # how long the stalled extension holds a request (the SDK would wait 240 s)
BOUND = 0.5  # DURABLE_CALL_TIMEOUT for the test


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-stall", "600")
    yield made
    made.close()


@contextmanager
def _stalled(harness: OpsHarness, route: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The extension holds every request whose path holds ``route`` (up to ``STALL``) while the block runs."""
    monkeypatch.setattr(durable_client, "DURABLE_CALL_TIMEOUT", timedelta(seconds=BOUND))
    released = threading.Event()

    def hold(method: str, path: str) -> None:
        if route in path:
            released.wait(STALL)

    harness.host.durable_api.before_answer = hold
    try:
        yield
    finally:
        released.set()
        harness.host.durable_api.before_answer = lambda method, path: None


def _post_answer(paused: OpsHarness, review: str) -> tuple[int, Any]:
    return paused.post("/api/ops/orders/o-stall/review", {"reviewId": review, "action": "fail", "reason": "x"})


def _answer_stalled(paused: OpsHarness, route: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Any]:
    """The answer posted while the extension holds ``route``'s requests, answered well before it lets go."""
    review = first_review("o-stall")
    began = time.monotonic()
    with _stalled(paused, route, monkeypatch):
        status, body = _post_answer(paused, review)
    took = time.monotonic() - began
    assert took < STALL / 2, f"the request waited {took:.1f} s for the extension"
    return status, body


def test_a_raise_the_extension_does_not_answer_is_said_uncertain_within_the_bound(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, body = _answer_stalled(paused, "/raiseEvent/", monkeypatch)

    assert status == 503 and body["noted"] is True, body
    assert "did not answer within" in body["error"], body
    # posted again once the extension answers: delivered
    status, body = _post_answer(paused, first_review("o-stall"))
    assert status == 200 and body["decision"] == "fail", body


def test_a_status_read_the_extension_does_not_answer_is_a_503_within_the_bound(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, body = _answer_stalled(paused, "/instances/", monkeypatch)

    assert status == 503 and "cannot say whether" in body["error"], body


def test_an_order_page_whose_durable_reads_stall_is_shown_without_them_within_the_bound(
    paused: OpsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    began = time.monotonic()
    with _stalled(paused, "/instances/", monkeypatch):
        status, body = paused.get("/api/ops/orders/o-stall")
    took = time.monotonic() - began

    assert took < STALL / 2, f"the page waited {took:.1f} s for the extension"
    assert status == 200 and body["attempts"] == [], body
    assert "did not answer within" in body["attemptsError"], body
