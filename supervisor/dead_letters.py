"""The dead-letter watch: one ``DeadLetterFound`` event per message that arrives in an app queue's dead-letter
subqueue, whoever moved it there, for the ``deadLettersFound`` log alert rule (infra/modules/alerts.bicep), which
pages once per queue and reason while new ones keep coming (its dimensions: queue and ``reason``): a burst is one
page, not one per message (the action group's 100 emails an hour to its one address were every rule's, and a rule
fires at most 300 alerts an evaluation), and so is a trickle (one page per watch run, the ``firstNew`` dimension
before, paged every run of it).

Service Bus's ``DeadletteredMessages`` metric counts the messages WAITING in dead-letter queues: a metric alert on
it is stateful, so while an old dead letter waits (operators often leave them for days) it stays fired and a new one
pages nobody. Above all one the broker moved (``MaxDeliveryCountExceeded``, ``TTLExpiredException``), which the app
never logs: it did not dead-letter it. The supervisor's timer runs the watch (``watch_dead_letters``) at most once
every ``WATCH_INTERVAL`` per process: each queue's subqueue is peeked from its first message, ``PEEK_BATCH`` at a
time, up to ``MAX_SCAN`` messages; those not seen waiting at the last read (``domain/dead_letters.py``: a document
per queue, written conditionally, so it survives restarts) are logged, then what waits now is kept as seen. The run
starts no peek that could end past ``WATCH_BUDGET``: it holds the supervisor's timer, whose next run waits for it (a
throttled namespace answering each bounded peek in 20 s held it twenty minutes); a read cut short is a partial read
(what lies beyond stays as it was), and the next run starts at the queue this one did not reach.

Not a cursor past the newest number logged: a dead-lettered message keeps the sequence number it had on its queue,
so the broker's dead-lettering of a message after its last delivery, or of a deferred message that expired, numbers
it below messages dead-lettered before it, and a cursor would never log it. A run that dies between logging and
writing, or two runs at once (the later write keeps its own view), log a dead letter twice: the rule's dimensions
make that one alert, the same queue and reason (a page missed is worse than a line logged twice). A subqueue
holding more than ``MAX_SCAN`` messages is watched over its lowest ``MAX_SCAN`` numbers (docs/observability.md).
Nothing of a body is logged but the order it names; the message id, reason and description (anyone with Listen on
the queue may set them) are made carriable.

A queue deleted and created again numbers its messages from 1 again: a number seen on the old queue and not waiting
any more is forgotten at the first read, so only numbers still recorded as waiting when it was deleted are missed
(docs/deploy.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from adapters.cosmos.documents import update_conditionally
from adapters.cosmos.errors import StoreUnavailable
from adapters.dead_letter_ports import DeadLetterWatchPorts
from adapters.servicebus.settlement import message_id_text, named_order
from contracts.names import APP_QUEUES
from domain.dead_letters import DeadLetterCursor
from domain.text import carriable, one_line
from observability.events import app_event
from settings import SEND_TIMEOUT
from supervisor.budget import RunBudget
from supervisor.run import phase_failed

if TYPE_CHECKING:
    from adapters.servicebus.browse import Peeker
    from dependencies import AppContext

# A queue the watch cannot read pages (SupervisorPhaseFailed) at its third failed watch in a row, about six minutes:
# a busy namespace or a dropped connection passes before that, a missing role or queue does not.
FAILURES_BEFORE_PAGE = 3
WATCH_INTERVAL = timedelta(minutes=2)  # the rule evaluates every 5 minutes
PEEK_BATCH = 100  # messages per peek
MAX_SCAN = 1000  # messages read per queue and run (ten peeks at most)
# Peeks a run may start: none that could end past this (each is bounded by SEND_TIMEOUT). The watch runs inside the
# supervisor's timer, whose next run (every 30 s) waits for it; a run stopped short leaves the rest to the next.
WATCH_BUDGET = timedelta(seconds=60)


def _text(value: Any, limit: int) -> str | None:
    return None if value is None else one_line(carriable(str(value)))[:limit]


def _found(queue: str, message: Any, first_new: int) -> None:
    reason = _text(message.dead_letter_reason, 128)
    description = _text(message.dead_letter_error_description, 300)
    seq = int(message.sequence_number)
    app_event(
        "DeadLetterFound",
        f"{queue}: dead letter #{seq} ({reason or 'no reason'}): {description or ''}",
        logging.WARNING,
        queue=queue,
        sequenceNumber=seq,
        firstNew=first_new,  # the lowest number new in this run (what a run found together)
        messageId=message_id_text(message),
        reason=reason,
        description=description,
        orderId=named_order(message),
        deliveryCount=int(message.delivery_count),
    )


def _waiting(
    receiver: Peeker, seen: DeadLetterCursor, may_peek: Callable[[], bool]
) -> tuple[list[int], list[Any], int | None]:
    """The numbers of the subqueue's messages from its first, up to ``MAX_SCAN`` (no peek after the first unless
    ``may_peek()``); those of them ``seen`` has not seen (only these are kept: a page of bodies up to 256 KB each is
    let go before the next is read); and the sequence number read up to when it holds more or the read stopped short
    (None: all of it was read)."""
    numbers: list[int] = []
    unseen: list[Any] = []
    start = 1
    while len(numbers) < MAX_SCAN and (start == 1 or may_peek()):
        page = receiver.peek(min(PEEK_BATCH, MAX_SCAN - len(numbers)), start)
        if not page:
            return numbers, unseen, None
        page_numbers = [int(m.sequence_number) for m in page]
        numbers.extend(page_numbers)
        unseen.extend(m for m, n in zip(page, page_numbers, strict=True) if not seen.has_seen(n))
        start = max(page_numbers) + 1
    return numbers, unseen, start - 1


def watch_queue(
    ports: DeadLetterWatchPorts, queue: str, now: datetime, may_peek: Callable[[], bool] = lambda: True
) -> int:
    """Logs the dead letters of ``queue`` not logged before (``MAX_SCAN`` read at most; a peek after the first only
    if ``may_peek()``), then keeps what waits as seen. Raises what a read, peek or write raised (nothing kept: the
    next run logs them again)."""
    seen = ports.cursors.get(queue) or DeadLetterCursor.fresh(queue, now)
    with ports.browser.open_dead_letters(queue) as receiver:
        numbers, unseen, read_up_to = _waiting(receiver, seen, may_peek)
    if unseen:
        first_new = min(int(m.sequence_number) for m in unseen)
        for message in sorted(unseen, key=lambda m: int(m.sequence_number)):
            _found(queue, message, first_new)
    if seen.seeing(numbers, read_up_to, now) is seen:
        return len(unseen)  # what was read is what waits: nothing to write (and no read again to find it out)
    update_conditionally(
        read=lambda: ports.cursors.get(queue),
        fresh=lambda: DeadLetterCursor.fresh(queue, now),
        change=lambda base: (base.seeing(numbers, read_up_to, now), None),
        unchanged=lambda _current, base, updated: updated is base,
        save=ports.cursors.save,
        what=f"dead letters seen in {queue}",
    )
    return len(unseen)


def watch_dead_letters(ctx: AppContext, queues: tuple[str, ...] = APP_QUEUES, budget: RunBudget | None = None) -> int:
    """The dead letters logged, every app queue watched (``watch_queue``), if ``WATCH_INTERVAL`` has passed since
    this process last watched. Never raises: a queue that fails ``FAILURES_BEFORE_PAGE`` watches in a row is a
    ``SupervisorPhaseFailed`` (the supervisorFailing rule pages it; before that a ``SupervisorRecoveryFailed``
    warning), the others are watched; one whose document the store could not read or write now
    (``StoreUnavailable``: throttled past the SDK's retries, 503) a ``SupervisorRecoveryFailed`` warning, as the rest
    of the run logs one: what it logged is logged again by the next run, one alert each. Nothing is peeked once the
    supervisor run's ``budget`` is spent (``supervisor/budget.py``): the next run watches, from the queue not
    reached."""
    ports = ctx.dead_letters
    now = ctx.clock.now()
    if ports is None or not ports.state.due(now, WATCH_INTERVAL):
        return 0
    run_spent = budget.spent if budget is not None else lambda: False
    if run_spent():  # not a watch: the next run's is due
        if budget is not None:
            budget.stopped("dead-letter watch", done=0, left=len(queues))
        return 0
    state = ports.state
    state.last_run = now
    started = state.monotonic()

    def may_peek() -> bool:  # a peek started now ends within the watch's budget, the run's not spent
        fits = state.monotonic() - started + SEND_TIMEOUT.total_seconds() <= WATCH_BUDGET.total_seconds()
        return fits and not run_spent()

    found = 0
    first = state.next_queue % len(queues) if queues else 0
    for i, queue in enumerate(queues[first:] + queues[:first]):
        if not may_peek():  # the budget is spent: the next run starts here
            state.next_queue = (first + i) % len(queues)
            if budget is not None and run_spent():
                budget.stopped("dead-letter watch", done=i, left=len(queues) - i)
            break
        try:
            found += watch_queue(ports, queue, now, may_peek)
            state.failed_in_a_row.pop(queue, None)
        except StoreUnavailable as exc:  # a blip, as elsewhere in the supervisor: the next run watches it again
            app_event(
                "SupervisorRecoveryFailed",
                f"dead-letter watch of {queue} skipped, store unavailable: {exc}",
                logging.WARNING,
                phase=f"dead-letter watch of {queue}",
            )
        except Exception as exc:
            failed = state.failed_in_a_row[queue] = state.failed_in_a_row.get(queue, 0) + 1
            if failed >= FAILURES_BEFORE_PAGE:
                phase_failed(f"dead-letter watch of {queue}", exc)
            else:  # the namespace busy, a connection lost: the next watch, two minutes on, reads it again
                app_event(
                    "SupervisorRecoveryFailed",
                    f"dead-letter watch of {queue} failed ({failed} in a row; paged at {FAILURES_BEFORE_PAGE}): {exc}",
                    logging.WARNING,
                    phase=f"dead-letter watch of {queue}",
                )
    return found
