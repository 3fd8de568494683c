"""An operator's request while the Durable extension answers a status read with 500 (its storage failing:
``HttpApiHandler`` answers an unexpected exception with a 500 and an error object). The SDK's ``get_status``
accepts a 500 (for it, "failed with an unhandled exception") and reads the error object as a status: empty,
falsy, as for an instance the backend does not know. The ops API took that for an attempt that is gone: a review
answer was refused 409 ("the paused attempt is not running: it cannot take the answer") although the attempt
was paused and waiting for it, and the order page listed the attempt as unknown to the backend. A status the
extension could not read is a 503 (post the same answer again) and a page without its attempts, saying why.
The 500s come from the runner's HTTP edge (``DurableExtensionApi.before_answer``), below the real client. A 500
without the error object (an empty body, a host's HTML page: ``read_status`` reads the code too) is the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from localrun.durable.extension_api.handlers import Answer, empty, json_answer
from tests.operations.harness import OpsHarness, first_review, paused_for_review

pytestmark = pytest.mark.cosmos

ERROR = {"Message": "Something went wrong while processing your request", "ExceptionMessage": "storage timeout"}
# each 500 the status reads answer, and what the order page's ``attemptsError`` says of it
FAILURES = {
    "the error object": (json_answer(500, ERROR), "storage timeout"),
    "an empty body": (empty(500), "HTTP 500"),
    "an HTML page": (
        Answer(500, b"<html>500 - Internal server error.</html>", {"Content-Type": "text/html"}),
        "JSONDecodeError",
    ),
}


@pytest.fixture
def paused(cosmos_db: Any) -> Iterator[OpsHarness]:
    made = paused_for_review(cosmos_db, "o-500", "600")
    yield made
    made.close()


def _status_reads_fail(harness: OpsHarness, answer: Answer) -> None:
    def fail(method: str, path: str) -> Answer | None:
        return answer if method == "GET" and "/instances/" in path else None

    harness.host.durable_api.before_answer = fail


def _answer(paused: OpsHarness) -> tuple[int, Any]:
    review = first_review("o-500")
    return paused.post("/api/ops/orders/o-500/review", {"reviewId": review, "action": "fail", "reason": "x"})


@pytest.mark.parametrize("failure", FAILURES.values(), ids=FAILURES.keys())
def test_a_review_answer_whose_status_read_fails_500_is_a_503_not_a_refusal(
    paused: OpsHarness, failure: tuple[Answer, str]
) -> None:
    _status_reads_fail(paused, failure[0])
    status, body = _answer(paused)
    assert status == 503 and "cannot say whether" in body["error"], body

    paused.host.durable_api.before_answer = lambda method, path: None
    status, body = _answer(paused)  # posted again once the extension reads: delivered
    assert status == 200 and body["decision"] == "fail", body


@pytest.mark.parametrize("failure", FAILURES.values(), ids=FAILURES.keys())
def test_an_order_page_whose_status_reads_fail_500_says_so_rather_than_unknown_attempts(
    paused: OpsHarness, failure: tuple[Answer, str]
) -> None:
    answer, said = failure
    _status_reads_fail(paused, answer)
    status, body = paused.get("/api/ops/orders/o-500")
    assert status == 200 and body["attempts"] == [], body
    assert said in body["attemptsError"] and "StatusUnreadable" in body["attemptsError"], body
