"""How far ahead any deadline the app writes can be, under the current settings.

Every ``completeBy`` a writer of the app sets is its write time plus one of a few settings (``domain/`` and
``activities/``): a claim's ``START_GRACE_SECONDS``; a step's ``STEP_TIMEOUT_SECONDS``; a review pause's
``REVIEW_TIMEOUT_SECONDS`` plus the start grace (``await_review``'s ``keep_until``); a retry's, a missed start's, a
stuck round's backoff (``RETRY_BACKOFF_MAX_SECONDS`` at most), an undo's held backoff plus the start grace
(``hold_undo``); an outage wait (``MAX_OUTAGE_WAIT_MINUTES`` from its start at most) and a payment wait
(``PAYMENT_WAIT_MINUTES``); a cancellation's not-before, the deadline of the step in flight. ``longest_deadline`` is
the longest of them.

``deadline_horizon`` adds ``MARGIN`` to it: a deploy that lowers one of those settings leaves the records written
before it with deadlines the old value ahead, up to ``MARGIN`` more than the new one allows, and they must not read as
hand edits. Used twice: the supervisor's sweep of stray documents pages the records whose ``completeBy`` is beyond
``now + deadline_horizon`` (``supervisor/stray.py``: moved ahead by hand, no query selects them before then), and an
attempt or round whose ``completeBy`` was removed (a hand edit: due at once, ``transitions.due_at``) is left to an
instance the backend still runs up to its ``updatedAt`` plus ``deadline_horizon`` (``supervisor/backend_wait.py``):
the deadline that instance holds was set by a write at or before ``updatedAt``, so it is within it."""

from __future__ import annotations

from datetime import timedelta

from settings import Settings

# What ``deadline_horizon`` adds to the longest deadline: a setting lowered by up to this much leaves no record with a
# deadline beyond the horizon (a review timeout of 8 days lowered to 1, say).
MARGIN = timedelta(days=7)


def longest_deadline(settings: Settings) -> timedelta:
    """The longest time ahead of its write any ``completeBy`` the app writes can be (the module docstring)."""
    return max(
        settings.start_grace,
        settings.step_timeout + settings.start_grace,
        settings.review_timeout + settings.start_grace,
        settings.retry_backoff_max + settings.start_grace,
        settings.max_outage_wait,
        settings.payment_wait,
    )


def deadline_horizon(settings: Settings) -> timedelta:
    """``longest_deadline`` plus ``MARGIN``: beyond it from now, a ``completeBy`` is no deadline of the app's."""
    return longest_deadline(settings) + MARGIN
