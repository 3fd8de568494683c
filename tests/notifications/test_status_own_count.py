"""The two counts of a final status's tries (``orchestrators.status._final_on_timers``), replayed by the SDK over
synthetic histories: tries answered ``ReceivedUnsent`` (the ``Received`` owed before the status failed) and the
status's own failures each have ``FINAL_RETRY_DELAYS``; the inputs say which try is the last of each
(``lastTry``, ``receivedTriesLeft``). The same for the status courier (``deliver_status_v1``), whose
``CancellationRejected`` waits for an owed ``Received`` too. Red team p10 seed 2 (tests/submission/
test_status_own_tries.py runs the activity with them against the store)."""

from __future__ import annotations

from typing import Any

from orchestrators import names
from orchestrators.status import FINAL_RETRY_DELAYS
from tests.notifications.test_refused_reply_queue import REFUSED, _play, _status_orchestrator

UNSENT = {"unsent": "Received", "error": "send to 'submitter-7' failed: QuotaExceeded"}
COUNT = len(FINAL_RETRY_DELAYS)  # the tries after the first of each count


def _flags(tries: list[Any]) -> list[tuple[Any, Any]]:
    return [(given.get("lastTry"), given.get("receivedTriesLeft")) for _, given in tries]


def test_the_courier_gives_a_status_its_own_count_once_received_is_out(functions: Any) -> None:
    """Six tries fail on ``Received``, then nine of the status's own: the sixteenth try sends it (``Sent``); the
    own count's last try alone says ``lastTry``, and each try says how many the ``Received``'s count has left."""
    courier = functions[names.DELIVER_STATUS].func
    given = {"orderId": "o1", "status": "CancellationRejected", "attempt": 0, "replyTo": "submitter-7"}
    answers: list[Any] = [UNSENT] * 6 + [RuntimeError("send failed")] * COUNT + [None]

    result, tries = _play(courier, lambda n: answers[n], name=names.DELIVER_STATUS, given=given)

    assert result.output == {"result": "Sent", "status": "CancellationRejected"}
    assert _flags(tries) == [(None, COUNT - n) for n in range(6)] + [(None, COUNT - 6)] * COUNT + [(True, COUNT - 6)]


def test_the_received_count_ends_the_tries_whatever_the_status_has_left() -> None:
    """Every try fails on ``Received``: the tenth says none is left (the activity gives both up) and the tries end
    (False), the status's own count untouched; no try says ``lastTry``."""
    result, tries = _play(_status_orchestrator("Completed"), lambda n: UNSENT)

    assert result.output is False
    assert _flags(tries) == [(None, COUNT - n) for n in range(COUNT + 1)]


def test_refusals_count_as_the_statuss_own_and_a_received_never_waited_for_is_not_counted() -> None:
    """A refused try is the status's own (its window as before). ``Rejected`` never waits for ``Received``: its
    tries say no count of it (tests/notifications/test_refused_reply_queue.py compares their inputs)."""
    result, tries = _play(_status_orchestrator("Completed"), lambda n: [UNSENT, REFUSED, None][n])
    assert result.output is True
    assert _flags(tries) == [(None, COUNT), (None, COUNT - 1), (None, COUNT - 1)]

    result, tries = _play(_status_orchestrator("Rejected"), lambda n: RuntimeError("send failed"))
    assert result.output is False and len(tries) == COUNT + 1
    assert all("receivedTriesLeft" not in t for _, t in tries) and tries[-1][1]["lastTry"] is True
