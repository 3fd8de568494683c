"""One page per problem, not per occurrence: the operator alerts whose repeats would page for the same problem
(``NotificationsStuck`` of a reply queue that stays broken, an owed alert sent again because its record cannot be
marked delivered, the same conflicting order data or the same refused order sent again and again, state documents
broken the same way) are held back while their problem lasts.

The raiser names the problem (a key) and asks ``already_paged`` before it raises the alert: False (raise it) when
the problem has no mark, when it was over (not seen for ``domain.alert_marks.ENDED_AFTER``), when its daily
reminder is due, when the context keeps no marks, and when the mark cannot be read (a store failure never holds a
first occurrence back); True (raise nothing: ``AlertRepeatHeld``) otherwise. After the alert went out (or was owed
to the alert courier, which sends it), ``note_paged`` writes the mark; a send that failed writes none, so the next
occurrence raises it again. ``raise_once_per_problem`` is that sequence, for every raiser whose alert is the
problem's page (the owed-alert resend of ``supervisor/owed.py`` asks and marks apart: its alert must raise, and
is marked only when its record cannot be). Marks are documents in the ``state`` container written on their etag
(``adapters/cosmos/alert_mark_store.py``): they survive restarts and are shared by every instance; two instances
that both find no mark (none yet, or expired) both raise: under the same alert id where the id is the problem's
(duplicate detection and the log alert rule's alertId dimension make that one page), but ``StatusUndelivered``'s
id is its order's status: two orders of one queue given up on at once page once each; and ``OrderRejected``'s names
the refused message: two messages of one refused content handled at once page once each."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Literal

from adapters.cosmos.alert_mark_store import AlertMarks
from adapters.cosmos.errors import StoreError
from adapters.servicebus.sender import MessageSender
from domain.alert_marks import AlertMark
from domain.ids import alert_id
from domain.timefmt import to_text
from notifications.alerts import OwedAlert, raise_alert_after_write, raise_alert_or_owe
from observability.events import app_event

log = logging.getLogger("notifications")


def already_paged(marks: AlertMarks | None, key: str, now: datetime, *, kind: str, order_id: str | None) -> bool:
    """Whether the problem ``key`` has paged and still lasts (its occurrence at ``now`` raises nothing: logged
    ``AlertRepeatHeld``, the mark noted seen, at most every ``SEEN_REFRESH``)."""
    if marks is None:
        return False
    try:
        mark = marks.get(key)
    except StoreError as exc:
        log.info("alert %s: its problem's mark could not be read (%s): raised", kind, exc)
        return False
    if mark is None or mark.pages(now):
        return False
    app_event(
        "AlertRepeatHeld",
        f"operator alert {kind}: the same problem paged at {to_text(mark.alerted_at)} ({mark.alert_id}) and "
        "still lasts: not raised again",
        alertKind=kind,
        orderId=order_id,
        alertId=mark.alert_id,
        pagedAt=to_text(mark.alerted_at),
    )
    note_seen(marks, mark, now, kind)
    return True


def note_seen(marks: AlertMarks, mark: AlertMark, now: datetime, what: str) -> None:
    """Notes ``mark``'s problem seen again at ``now`` without paging (written at most every ``SEEN_REFRESH``), so that
    it does not end while it lasts. Best effort: a write that fails ages the mark by one refresh."""
    seen = mark.seen(now)
    if seen is not mark:
        try:
            marks.save(seen)
        except StoreError as exc:  # another sweep noted it, or the store is down: the mark ages by one refresh
            log.info("alert %s: its problem's mark not noted seen: %s", what, exc)


def note_paged(marks: AlertMarks | None, key: str, alert_id: str, now: datetime) -> None:
    """Marks the problem ``key`` paged by ``alert_id`` at ``now``. Best effort: a write that fails (the store down,
    another instance's mark written meanwhile) leaves the next occurrence to page, never one held back wrongly."""
    if marks is None:
        return
    try:
        before = marks.get(key)
        marks.save(AlertMark.paged(key, alert_id, now, before))
    except StoreError as exc:
        log.info("alert %s: its problem's mark not written: %s", alert_id, exc)


def note_over(marks: AlertMarks | None, key: str, now: datetime) -> None:
    """Marks the problem ``key`` over at ``now`` (the thing that failed worked again): its next occurrence pages at
    once, not only after ``ENDED_AFTER`` without one. Best effort: a mark not written leaves its problem to end by
    the clock, as before."""
    if marks is None:
        return
    try:
        mark = marks.get(key)
        if mark is not None and not mark.ended(now):
            marks.save(mark.over(now))
    except StoreError as exc:
        log.info("alert mark %s not marked over: %s", key, exc)


Raised = Literal["sent", "held", "unsent"]


def raise_once_per_problem(
    marks: AlertMarks | None,
    sender: MessageSender,
    problem: str,
    *,
    owed: list[OwedAlert] | None = None,
    held_order_id: str | None = None,
    **alert: Any,
) -> Raised:
    """The alert ``alert`` (``raise_alert_after_write``'s keywords), once per ``problem`` while it lasts: held
    (``already_paged``: "held"), or raised and, once it went out, the problem marked paged under the alert's id
    (``note_paged``: "sent"); a send that failed marks nothing ("unsent": the next occurrence raises it again).
    ``marks`` None keeps no mark: raised every time. ``owed``: a trigger with a message in hand, whose failed send
    is owed to the alert courier (``raise_alert_or_owe``, appended to ``owed``) and marks nothing either: its
    hand-over may fail and leave it to the message handled again (its store-retry copy). ``held_order_id``: the
    order the occurrence was met on, for ``AlertRepeatHeld``, when the alert itself names none."""
    at: datetime = alert["at"]
    kind: str = alert["kind"]
    order_id: str | None = alert.get("order_id")
    seen_on = order_id if held_order_id is None else held_order_id
    if already_paged(marks, problem, at, kind=kind, order_id=seen_on):
        return "held"
    if owed is None:
        went_out = raise_alert_after_write(sender, **alert)
    else:
        unsent = raise_alert_or_owe(sender, **alert)
        if unsent is not None:
            owed.append(unsent)
        went_out = unsent is None
    if not went_out:
        return "unsent"
    note_paged(marks, problem, alert_id(kind, order_id, alert.get("discriminator", "")), at)
    return "sent"
