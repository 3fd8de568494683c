"""Red team (redteam38) of the owed sweep's alert-first order (supervisor/owed.py ``send_owed``): the note of an
alert that went out before a status send failed (``OwedAlertSent``) must never hide that send's ``SendError``, which
is what ``deliver_owed`` alerts ``NotificationsStuck`` on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adapters.servicebus.sender import SendError
from dependencies import AppContext
from domain.records import OWED_ALERT_SENT
from supervisor import owed
from tests.supervisor.test_owed_queue_full import _alert_ids, _escalated

pytestmark = pytest.mark.cosmos


def test_a_failed_send_of_a_record_read_back_without_its_etag_still_raises_its_send_error(
    app_context: AppContext,
) -> None:
    """FINDING (minor). ``update_once_or_reread`` answers a write whose response was lost, and that another writer
    moved on since, with the record as written and ``version=None`` (adapters/cosmos/state_store.py); the
    supervisor's recovery and compensation rounds hand that record to ``deliver_owed`` as it is. ``send_owed``
    sends the alert, the full queue refuses the status, and ``_note_alert_sent`` asks the store for a conditional
    replace without an etag: ``ValueError`` ("a conditional replace needs the version ..."), which it does not
    catch, so it replaces the ``SendError``. ``deliver_owed`` then takes it for a record that cannot be built
    (``OwedNotificationsFailed`` ``ValueError``, ``failed_send`` False: its stuck hours counted from
    ``STUCK_ALERT_AFTER``, which never meet a resend window). A note that cannot be written is only logged."""
    ctx, sender = _escalated(app_context)
    record = ctx.states.get("o-full")
    assert record is not None
    assert record.history[-1].event == OWED_ALERT_SENT  # the escalation's own delivery noted its alert
    as_written = replace(record, history=record.history[:-1], version=None)  # the escalation as read back
    sent_before = len(_alert_ids(sender, "RetriesExhausted"))
    with pytest.raises(SendError):
        owed.send_owed(ctx, as_written)
    assert len(_alert_ids(sender, "RetriesExhausted")) == sent_before + 1  # the alert went out first
