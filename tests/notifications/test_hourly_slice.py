"""``hourly_slice``: an alert a frequent caller repeats is sent at most once an hour without state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from notifications.alerts import DUPLICATE_WINDOW, hourly_slice

SINCE = datetime(2026, 5, 1, 9, tzinfo=UTC)


def test_only_the_first_duplicate_window_of_each_hour_sends_and_each_hour_has_its_own_id() -> None:
    runs = [SINCE + timedelta(seconds=30 * n) for n in range(-10, 3 * 120)]  # every 30 s for 3 hours
    slices = [hourly_slice(SINCE, at) for at in runs]
    sending = [(at, hour) for at, hour in zip(runs, slices, strict=True) if hour is not None]
    assert {hour for _, hour in sending} == {0, 1, 2}
    for hour in (0, 1, 2):
        moments = [at for at, h in sending if h == hour]
        # one MessageId per hour, every send within the duplicate window of the first: Service Bus keeps one
        assert moments[0] == SINCE + timedelta(hours=hour)
        assert moments[-1] - moments[0] < DUPLICATE_WINDOW
    assert hourly_slice(SINCE, SINCE - timedelta(seconds=1)) is None
    assert hourly_slice(SINCE, SINCE + DUPLICATE_WINDOW) is None
    assert hourly_slice(SINCE, SINCE + timedelta(minutes=59, seconds=59)) is None


def test_owed_notifications_are_resent_only_in_the_first_duplicate_window_of_each_hour() -> None:
    from dataclasses import replace

    from domain.records import StateRecord
    from domain.states import ProcessState
    from supervisor.owed import resend_due

    record = StateRecord(
        id="o-1", order_id="o-1", process_state=ProcessState.ERROR, complete_by=SINCE, updated_at=SINCE
    )
    assert resend_due(record, SINCE) and resend_due(record, SINCE + DUPLICATE_WINDOW - timedelta(seconds=1))
    assert not resend_due(record, SINCE + DUPLICATE_WINDOW)
    assert not resend_due(record, SINCE + timedelta(minutes=40))
    assert resend_due(record, SINCE + timedelta(hours=1))
    assert not resend_due(replace(record, complete_by=None), SINCE)
