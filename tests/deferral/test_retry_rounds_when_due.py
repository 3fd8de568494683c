"""A ``RetryDeferred`` round is acted on only once it is due. ``RetryDeferred`` is the app's message to
itself, but it arrives on the public ``orders`` queue, which submitters may send to; a round acted on while
the dependency is still down moves the message to its next round, so retries that come before their round
is due would spend the whole retry budget (``DEFER_MAX_ROUNDS`` rounds, meant to span that many retry
delays of a dependency's outage) in moments.

Found by red team 6: ``submission/retry_deferred.py`` took any retry naming the round scheduled
(``entry.rounds``); ``DEFER_MAX_ROUNDS`` forged retries sent within a second (the order id and a sequence
number are all they need: a sender learns the queue's sequence numbers from ``schedule_messages``) had the
genuine notification dead-lettered ``DependencyUnavailable`` at once, and the dependency back one retry
delay later found nothing to apply. Now the entry keeps its round's due time (``retryDueAt``), and a retry
before it (less ``RETRY_CLOCK_TOLERANCE``) is completed unread, with a ``RetryDeferredIgnored`` event.

The retries sent here carry the entry's token, as the app's own do, so the due time is what stops them;
one without the token is refused before its round is looked at (``test_retry_tokens.py``)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from domain.deferral import RETRY_CLOCK_TOLERANCE
from tests.deferral.support import deferred_for_the_order_database, deferred_sequence_numbers, deliver, deliver_all
from tests.deferral.test_retry_deferred_not_for_now import send_retry

pytestmark = pytest.mark.cosmos


def test_retries_of_the_scheduled_rounds_sent_at_once_do_not_use_up_the_budget_of_a_short_outage(
    functions: Any, ctx: Any, broker: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    token = with_orders.deferrals.get("p1").entry(seq).retry_token
    budget = with_orders.settings.defer_max_rounds
    start = clock.now()

    caplog.set_level(logging.INFO)
    for round_number in range(1, budget + 1):  # no time passes: each names the round just scheduled
        send_retry(broker, seq, round_number, 100 + round_number, token)
        deliver_all(functions, broker)

    assert clock.now() == start
    dead = [(d.sequence_number, d.reason) for d in broker.dead_letters(ORDERS_QUEUE)]
    assert dead == [], f"{budget} RetryDeferred messages sent at once dead-lettered the genuine notification: {dead}"
    entry = with_orders.deferrals.get("p1").entry(seq)
    assert (entry.rounds, entry.retry_due_at) == (1, start + with_orders.settings.defer_retry_delay)
    ignored = [r for r in caplog.records if getattr(r, "event", None) == "RetryDeferredIgnored"]
    assert len(ignored) == budget and "not due" in ignored[0].why  # type: ignore[attr-defined]

    orders.failing = False  # the order database is back after one retry delay
    clock.advance(with_orders.settings.defer_retry_delay)
    deliver_all(functions, broker)
    assert with_orders.states.get("p1").payment is not None


def test_a_round_is_acted_on_from_its_due_time_less_the_clock_tolerance(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    _, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    entry = with_orders.deferrals.get("p1").entry(seq)
    clock.advance(entry.retry_due_at - clock.now() - RETRY_CLOCK_TOLERANCE - timedelta(milliseconds=1))
    send_retry(broker, seq, 1, 1, entry.retry_token)
    assert deliver(functions, broker)  # just before: ignored
    assert with_orders.deferrals.get("p1").entry(seq).rounds == 1
    clock.advance(timedelta(milliseconds=1))
    send_retry(broker, seq, 1, 2, entry.retry_token)
    assert deliver(functions, broker)  # the tolerance: acted on, still down, round 2 scheduled
    assert with_orders.deferrals.get("p1").entry(seq).rounds == 2


def test_the_round_before_coming_back_keeps_the_due_time_of_the_round_scheduled(
    functions: Any, ctx: Any, broker: Any, clock: Any
) -> None:
    """Round 1 decided (still down: round 2 recorded and sent), then round 1 again (a redelivery after a
    lost settlement, a store-retry copy): decided again, it records round 2 again, and must not move round
    2's due time, or round 2's own retry, scheduled for the first, would come early and be ignored."""
    orders, with_orders = deferred_for_the_order_database(functions, ctx, broker)
    [seq] = deferred_sequence_numbers(broker)
    clock.advance(with_orders.settings.defer_retry_delay)
    deliver_all(functions, broker)  # round 1: still down, round 2 due a retry delay from now
    entry = with_orders.deferrals.get("p1").entry(seq)
    due = entry.retry_due_at
    assert due == clock.now() + with_orders.settings.defer_retry_delay

    clock.advance(with_orders.settings.defer_retry_delay / 2)
    send_retry(broker, seq, 1, 1, entry.retry_token)  # round 1 again
    assert deliver(functions, broker)
    entry = with_orders.deferrals.get("p1").entry(seq)
    assert (entry.rounds, entry.retry_due_at) == (2, due)

    orders.failing = False
    clock.advance(with_orders.settings.defer_retry_delay / 2)
    deliver_all(functions, broker)  # round 2's own retry, when it was due
    assert with_orders.states.get("p1").payment is not None
