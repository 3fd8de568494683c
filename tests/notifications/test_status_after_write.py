"""The ``publish_status`` activity, which sends a status after the write that made it true."""

from __future__ import annotations

from adapters.clock import ManualClock
from dependencies import AppContext
from domain.states import ProcessState
from tests.activity_calls import run
from tests.contexts import context_with


def test_the_status_activity_sends_to_the_queue_it_is_given_without_reading_the_record():
    """The queue comes with the status (the orchestration's plan read it): the record is not read, this process
    having seen it end without owing ``Received`` (a round's ``Compensated`` after the ``finish_compensation``
    write). A failure status (``Failed``, ``CompensationFailed``) is the exception: it reads the record, fresh,
    for an order an operator may have moved on since (test_failure_status_after_operator_acted.py)."""
    from activities.scheduler_steps import publish_status
    from domain.states import ProcessState
    from tests.fakes import RecordingSender

    sender = RecordingSender()
    ctx = storeless_context(sender, ended=ProcessState.COMPENSATED)
    run(publish_status, ctx, {"orderId": "o1", "status": "Compensated", "attempt": 2, "replyTo": "submitter-7"})
    assert sender.message_ids("submitter-7") == ["o1:Compensated:2"]


def test_a_failure_status_reads_the_record_once_and_never_decides_on_a_cached_version():
    """``Failed`` reads the record fresh (this process's cached version may predate an operator's resubmit, written
    by the ops API's process): one read, whose ended version the ``Received`` check then uses; a record moved on
    since (``Pending`` again, the cached version still ``Error``) gets nothing sent."""
    import dataclasses
    from datetime import UTC, datetime

    from activities.scheduler_steps import publish_status
    from domain.records import StateRecord
    from tests.fakes import RecordingSender

    at = datetime(2026, 1, 1, tzinfo=UTC)
    failed = StateRecord(id="o1", order_id="o1", process_state=ProcessState.ERROR, attempt=2, updated_at=at)

    class CountedReads:
        def __init__(self, stored: StateRecord) -> None:
            self.cached, self.stored, self.reads = failed, stored, 0

        def recent(self, order_id: str) -> StateRecord:
            return self.cached

        def get(self, order_id: str) -> StateRecord:
            self.reads += 1
            self.cached = self.stored
            return self.stored

    given = {"orderId": "o1", "status": "Failed", "attempt": 2, "replyTo": "submitter-7"}
    for stored, sent in (
        (failed, ["o1:Failed:2"]),
        (dataclasses.replace(failed, process_state=ProcessState.PENDING), []),
    ):
        sender, store = RecordingSender(), CountedReads(stored)
        ctx = dataclasses.replace(storeless_context(sender), states=store)  # type: ignore[arg-type]
        assert run(publish_status, ctx, given) is None
        assert (sender.message_ids("submitter-7"), store.reads) == (sent, 1)


def test_completed_is_sent_without_reading_the_record_when_this_process_saw_it_end_owing_nothing():
    """Every status but ``Received`` and ``Rejected`` says a ``Received`` the record still owes first
    (notifications/received.py): the record is not read when this process's last version of it ended without the
    mark (a mark is never set on an ended record), only when that version is missing, not ended or still marked."""
    from activities.scheduler_steps import publish_status
    from domain.states import ProcessState
    from tests.fakes import RecordingSender

    sender = RecordingSender()
    ctx = storeless_context(sender, ended=ProcessState.PROCESSED)
    run(publish_status, ctx, {"orderId": "o1", "status": "Completed", "attempt": 2, "replyTo": "submitter-7"})
    assert sender.message_ids("submitter-7") == ["o1:Completed:2"]


class OnlyRecent:
    """A state store that only has this process's last version of the record: reading it fails the test."""

    def __init__(self, recent: object) -> None:
        self._recent = recent

    def recent(self, order_id: str) -> object:
        return self._recent

    def get(self, order_id: str) -> None:
        raise AssertionError("the record was read")


def storeless_context(sender: object, ended: ProcessState | None = None) -> AppContext:
    """A context whose stores fail the test when used; ``ended``: but for this process's last version of the
    order's record (``recent``), ended in that state without owing ``Received``."""
    import random
    from datetime import UTC, datetime

    from domain.records import StateRecord
    from settings import Settings

    class NoReads:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"a store was used: {name}")

    unused = NoReads()
    ctx = AppContext(
        Settings.from_env({}),
        ManualClock(),
        unused,  # type: ignore[arg-type]
        unused,  # type: ignore[arg-type]
        sender,  # type: ignore[arg-type]
        {},
        deferred=unused,  # type: ignore[arg-type]
        deferrals=unused,  # type: ignore[arg-type]
        ops=unused,  # type: ignore[arg-type]
        health=unused,  # type: ignore[arg-type]
        rng=random.Random(1),
    )
    if ended is None:
        return ctx
    at = datetime(2026, 1, 1, tzinfo=UTC)
    record = StateRecord(id="o1", order_id="o1", process_state=ended, reply_to="submitter-7", updated_at=at)
    return context_with(ctx, states=OnlyRecent(record))


def test_a_final_status_whose_last_try_fails_is_alerted_status_undelivered_and_an_earlier_try_is_not():
    """A final status retried on durable timers for about six hours: only the last try (``lastTry``) makes
    its failure an operator's business: a ``StatusUndelivered`` alert (the reply queue is what fails, the
    alert queue works), and the activity still fails, as every try that did not send."""
    import pytest

    from activities.scheduler_steps import publish_status
    from adapters.servicebus.sender import SendError
    from contracts.names import OPERATOR_ALERTS_QUEUE
    from tests.fakes import RecordingSender

    class ReplyQueueDown(RecordingSender):
        def send(self, queue: str, message: object) -> None:
            if queue == "submitter-7":
                raise SendError("send to 'submitter-7' failed: ServiceCommunicationProblem")
            super().send(queue, message)  # type: ignore[arg-type]

    given = {"orderId": "o1", "status": "Completed", "attempt": 2, "replyTo": "submitter-7"}
    earlier = ReplyQueueDown()
    with pytest.raises(SendError):
        run(publish_status, storeless_context(earlier, ended=ProcessState.PROCESSED), given)
    assert earlier.sent == []
    last = ReplyQueueDown()
    with pytest.raises(SendError):
        run(publish_status, storeless_context(last, ended=ProcessState.PROCESSED), {**given, "lastTry": True})
    assert last.message_ids(OPERATOR_ALERTS_QUEUE) == ["alert:StatusUndelivered:o1:Completed:2"]
    alert = last.bodies(OPERATOR_ALERTS_QUEUE)[0]
    assert alert["details"]["replyTo"] == "submitter-7" and alert["details"]["status"] == "Completed"


def test_only_the_status_couriers_last_try_says_it_is_the_last(functions):
    """Replayed by the SDK: the status courier's tries hand ``publish_status`` the status as given, and the
    last one, after the last delay, ``lastTry`` too."""
    import json

    from orchestrators import names
    from orchestrators.status import FINAL_RETRY_DELAYS
    from tests.durable_history import History

    courier = functions[names.DELIVER_STATUS].func
    given = {"orderId": "o1", "status": "Rejected", "attempt": 0, "replyTo": "submitter-7", "variant": "42"}
    from datetime import UTC, datetime

    h = History("status:o1:Rejected:0:42", given, start=datetime(2026, 3, 1, tzinfo=UTC), name=names.DELIVER_STATUS)
    assert [json.loads(a["input"]) for a in h.run(courier).new_actions] == [given]
    h.activity_failing(names.PUBLISH_STATUS, "send failed", FINAL_RETRY_DELAYS[:-1])
    h.run(courier)
    h.timer_fired(h.now + FINAL_RETRY_DELAYS[-1])
    last = h.run(courier)
    assert [(a["functionName"], json.loads(a["input"])) for a in last.new_actions] == [
        (names.PUBLISH_STATUS, {**given, "lastTry": True})
    ]
    h.activity_failed(names.PUBLISH_STATUS, "send failed", at=h.now)
    assert h.run(courier).output == {"result": "GaveUp", "status": "Rejected"}


def test_a_last_try_that_cannot_read_the_reply_queue_is_alerted_status_undelivered_too():
    """A final status whose input does not carry ``replyTo`` (a retired version's ``Completed``, a plan recorded
    without it) reads it from the record on every try. A last try whose read fails (the store throttled or
    down) ends the status as surely as a failed send: nothing tries again, so it is alerted
    ``StatusUndelivered`` too; an earlier try's failed read only fails the activity (the timers retry it)."""
    import dataclasses

    import pytest

    from activities.scheduler_steps import publish_status
    from adapters.cosmos.errors import StoreUnavailable
    from contracts.names import OPERATOR_ALERTS_QUEUE
    from tests.fakes import RecordingSender

    class StoreDown:
        def get(self, order_id: str) -> None:
            raise StoreUnavailable("Cosmos DB 503 on read")

    given = {"orderId": "o1", "status": "Completed", "attempt": 2}  # no replyTo: read from the record
    for extra, alerted in (({}, []), ({"lastTry": True}, ["alert:StatusUndelivered:o1:Completed:2"])):
        sender = RecordingSender()
        ctx = dataclasses.replace(storeless_context(sender), states=StoreDown())  # type: ignore[arg-type]
        with pytest.raises(StoreUnavailable):
            run(publish_status, ctx, {**given, **extra})
        assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == alerted
        if alerted:
            [alert] = sender.bodies(OPERATOR_ALERTS_QUEUE)
            assert alert["details"]["replyTo"] is None and "503" in alert["details"]["error"]
            assert "None" not in alert["summary"]


def test_a_status_the_failure_record_owes_has_no_last_try_and_every_other_final_status_has():
    """``Failed`` and ``CompensationFailed`` are owed by the write that made them true (``supervisor/owed.py``):
    the supervisor's sweep sends them until acknowledged, with no end, and alerts ``NotificationsStuck`` once an
    hour meanwhile. The scheduler's timers running out is not the app giving up on them, so their last try on
    the timers does not say ``lastTry`` (a ``StatusUndelivered`` alert would tell an operator to tell the
    submitter another way while the supervisor still delivers it); ``Completed``'s and ``Compensated``'s does.
    Replayed by the SDK, every try failing."""
    import json
    from datetime import UTC, datetime
    from typing import Any

    from contracts.messages import StatusName
    from orchestrators import names
    from orchestrators.status import FINAL_RETRY_DELAYS, OWED_BY_THE_RECORD, call_publish_status
    from supervisor.owed import OWED_BY_EVENT
    from tests.durable_history import History

    assert {status for _, _, status in OWED_BY_EVENT.values()} == OWED_BY_THE_RECORD

    class Plan:
        reply_to = "submitter-7"
        reply_to_known = True

    def last_input(status: StatusName) -> dict[str, Any]:
        def orchestrator(context: Any) -> Any:
            return (yield from call_publish_status(context, "o1", status, 2, plan=Plan()))

        h = History("o1:2", {}, start=datetime(2026, 3, 1, tzinfo=UTC))
        h.activity_failing(names.PUBLISH_STATUS, "send failed", FINAL_RETRY_DELAYS)
        result = h.run(orchestrator)
        assert result.is_done and result.output is False
        scheduled = [a for a in result.actions if a["type"] == "CallActivity"]
        assert len(scheduled) == len(FINAL_RETRY_DELAYS) + 1
        return dict(json.loads(scheduled[-1]["input"]))

    for final in ("Completed", "Compensated"):
        assert last_input(final).get("lastTry") is True, final
    for owed in ("Failed", "CompensationFailed"):
        assert "lastTry" not in last_input(owed), owed


def test_the_last_try_of_completed_whose_record_cannot_be_read_is_alerted_status_undelivered():
    """The last try of ``Completed`` must read the record (is a ``Received`` still owed first?) and Cosmos DB
    fails: the status is given up and alerted as when its send fails, not dropped silently."""
    import pytest

    from activities.scheduler_steps import publish_status
    from adapters.cosmos.errors import StoreUnavailable
    from contracts.names import OPERATOR_ALERTS_QUEUE
    from tests.fakes import RecordingSender

    class StoreDown:
        def recent(self, order_id: str) -> None:
            return None

        def get(self, order_id: str) -> None:
            raise StoreUnavailable("Cosmos DB 503 on read")

    sender = RecordingSender()
    ctx = context_with(storeless_context(sender), states=StoreDown())
    given = {"orderId": "o1", "status": "Completed", "attempt": 2, "replyTo": "submitter-7", "lastTry": True}
    with pytest.raises(StoreUnavailable):
        run(publish_status, ctx, given)
    assert sender.message_ids("submitter-7") == []
    assert sender.message_ids(OPERATOR_ALERTS_QUEUE) == ["alert:StatusUndelivered:o1:Completed:2"]
