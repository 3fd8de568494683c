"""Test clocks move by durations named after what they pass, derived from the settings, not by bare numbers
(``clock.advance(just_past(ctx.settings.step_timeout))`` instead of ``timedelta(seconds=61)``)."""

from __future__ import annotations

from datetime import timedelta

JUST_PAST = timedelta(seconds=1)  # how far past a deadline a test's clock goes


def just_past(deadline_after: timedelta) -> timedelta:
    """From the moment a deadline was set ``deadline_after`` ahead, to just past it."""
    return deadline_after + JUST_PAST
