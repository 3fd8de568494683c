"""Red team (rt-marks): a reply queue that took sends again and broke again within two hours was not paged; an
owed alert held in the hourly resends of an unwritable record was never reminded.

``NotificationsStuck`` for a reply queue is one alert per queue and error while the problem lasts, and the problem
is over when not seen for ``ENDED_AFTER`` (two hours). Seen is measured on the stuck sends the owed sweep meets, so
a queue that drained (the operator's fix: its failed orders' statuses delivered) and filled again an hour later was
the same problem still: the new orders' stuck statuses were held (``AlertRepeatHeld``) and each sighting kept the
mark fresh, so nobody was paged for the queue broken again until the daily reminder, up to a day later.

Now a status the owed sweep delivers to the queue ends its problem (the mark read as over): the queue broken again
pages at once. Runs the real owed sweep over the real Cosmos SDK (the local protocol server)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.clock import ManualClock
from adapters.cosmos.state_store import CosmosStateStore
from tests.fakes import RecordingSender, StateStoreThatFails
from tests.supervisor.conftest import MakeContext
from tests.supervisor.test_redteam47_alert_noise import FULL, FullQueues, _alerts, _failed, _sweep

pytestmark = pytest.mark.cosmos


def test_a_queue_that_drained_and_filled_again_within_two_hours_pages_again(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    sender = FullQueues()
    sender.full.add(FULL[0])
    ctx = make_ctx(sender=sender)
    _failed(states, clock, "o-1", FULL[0])
    _sweep(ctx, clock, timedelta(minutes=40))
    _failed(states, clock, "o-2", FULL[0])  # its resend windows 40 minutes into each hour
    _sweep(ctx, clock, timedelta(hours=2, minutes=6))  # stuck alert at 1 h; seen at 1:40, 2:00, 2:40
    assert len(_alerts(sender, "NotificationsStuck")) == 1
    sender.full.clear()  # the operator drains the queue at 2:46
    _sweep(ctx, clock, timedelta(minutes=20))
    record = states.get("o-1")
    assert record is not None and record.complete_by is None  # o-1's statuses delivered at 3:00
    sender.full.add(FULL[0])  # and it fills again at 3:06, before o-2's next window
    _failed(states, clock, "o-3", FULL[0])
    _sweep(ctx, clock, timedelta(hours=3))
    stuck = _alerts(sender, "NotificationsStuck")
    # before: 1 (o-2's and o-3's stuck statuses from 3:40 held behind the alert of 1 h, their own sightings keeping
    # its mark fresh: the queue broken again paged by nobody until the daily reminder)
    assert len({a["alertId"] for a in stuck}) == 2, [a["summary"] for a in stuck]


def test_a_queue_that_stays_full_still_pages_once(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock
) -> None:
    """The counterpart: another queue taking sends ends nothing of this one's."""
    sender = FullQueues()
    sender.full.add(FULL[0])
    ctx = make_ctx(sender=sender)
    _failed(states, clock, "o-1", FULL[0])
    _sweep(ctx, clock, timedelta(hours=1))
    _failed(states, clock, "o-other", FULL[1])  # its queue takes sends: delivered
    _failed(states, clock, "o-2", FULL[0])
    _sweep(ctx, clock, timedelta(hours=3))
    assert len({a["alertId"] for a in _alerts(sender, "NotificationsStuck")}) == 1


def test_an_owed_alert_whose_record_stays_unwritable_is_reminded_once_a_day(
    make_ctx: MakeContext, states: CosmosStateStore, clock: ManualClock, sender: RecordingSender
) -> None:
    """Red team (rt-marks): the owed alert that went out but whose record cannot be marked delivered is held in the
    next hours' resends, and each resend whose acknowledgement failed again wrote its mark as paged anew (alerted
    now): the daily reminder (``REPEAT_AFTER``) never came, and a record that stays unwritable was paged once, ever.
    Only a send that went out marks it paged; the held resends leave the time it paged as it was."""
    _failed(states, clock, "o-unwritable", "client-a")
    ctx = make_ctx(states=StateStoreThatFails(states, "replace"))
    for _ in range(26):  # the sweep in each hour's resend window (every two minutes in it), 26 hours long
        _sweep(ctx, clock, timedelta(minutes=10))
        clock.advance(timedelta(minutes=50))
    # the hours it was raised in (the sweeps of one window: one alert id, duplicate detection's 10 minutes)
    hours = sorted({str(a["at"])[:13] for a in _alerts(sender, "OrderFailed")})
    # before: the first hour's only (each hour's held resend wrote the mark as paged that hour)
    assert hours == ["2026-01-01T00", "2026-01-02T00"], hours  # and a day after it paged, once
