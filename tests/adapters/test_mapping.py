"""The JSON documents of the domain's records (adapters/cosmos/mapping.py).

The expected documents below were produced by the records' earlier pydantic form
(``model_dump(mode="json", by_alias=True, exclude={"version"})``) for the same records: what is
stored in Cosmos did not change when the records became dataclasses. Fields added since are in them
too (``receivedOwed``: a document written before it reads as not owing ``Received``; ``submittedAs``: one
written before it names no creating message; ``paymentWaitSince``: one written before it waits for no
payment; ``reviewDefault``: one written before it does not know its review's default; ``startsMissed``: one
written before it knows of no start missed; a compensation entry's ``undoneBy``: one written before it was undone
by no operator's hand)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from adapters.cosmos.documents import stored
from adapters.cosmos.mapping import DocumentError, camel, from_document, to_document
from domain.circuit import CircuitState, DependencyHealth
from domain.deferral import DeferralDocument, DeferralReason, DeferredEntry, EntryStatus, RefusedNotification
from domain.records import (
    CompensationEntry,
    HistoryEntry,
    LastWrite,
    PaymentReceived,
    ReviewDefault,
    StateRecord,
    StepState,
)
from domain.states import ProcessState, StepStatus

T = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def rich_record() -> StateRecord:
    """Every field set, nested records of every kind, one timestamp given in another offset."""
    return StateRecord(
        id="o-1",
        order_id="o-1",
        process_state=ProcessState.COMPENSATING,
        locked_by="o-1:c2",
        complete_by=T + timedelta(minutes=5),
        failure_count=2,
        attempt=3,
        reply_to="replies",
        current_step="charge-payment",
        steps={
            "reserve-inventory": StepState(
                status=StepStatus.SUCCEEDED,
                agent="inventory",
                request_id="o-1:reserve-inventory:1",
                attempt=1,
                started_at=T,
                finished_at=T + timedelta(seconds=1),
                result={"reservationId": "r-9", "lines": [1, 2], "nested": {"ok": True, "none": None, "f": 1.5}},
            ),
            "charge-payment": StepState(
                status=StepStatus.FAILED,
                agent="payment",
                request_id="o-1:charge-payment:3",
                attempt=3,
                started_at=T + timedelta(seconds=2),
                finished_at=None,
                error="declined",
                agents=["payment-backup", "payment"],
            ),
        },
        compensation=[
            CompensationEntry(
                seq=1,
                step="reserve-inventory",
                agent="inventory",
                undo_action="release",
                data={"reservationId": "r-9"},
                attempt=1,
                at=T + timedelta(seconds=3),
                outcome="Undone",
                outcome_at=T + timedelta(seconds=4),
                error=None,
                undo_result={"releaseId": "rel-1", "units": 2},
            ),
            CompensationEntry(
                seq=2,
                step="charge-payment",
                agent="payment",
                undo_action="refund",
                data={"outcomeUnknown": True},
                attempt=3,
                at=T + timedelta(seconds=5),
            ),
        ],
        last_error="charge-payment: declined",
        payment=PaymentReceived(
            notification_id="n-1",
            amount_cents=1250,
            currency="EUR",
            provider_reference="psp-7",
            received_at=datetime(2026, 3, 4, 7, 0, 0, tzinfo=timezone(timedelta(hours=2))),
            sequence_number=42,
        ),
        outage_wait_since=T - timedelta(days=1),
        payment_wait_since=T - timedelta(hours=1),
        received_owed=T - timedelta(hours=2),
        submitted_as=4711,
        review_default=ReviewDefault(review_id="o-1:2:charge-payment:review:1", action="retry"),
        starts_missed=2,
        last_write=LastWrite(by="o-1:2", number=3),
        history=[
            HistoryEntry(at=T, event="Received", by="submission"),
            HistoryEntry(at=T + timedelta(seconds=6), event="Compensating", by="o-1:1", detail="charge-payment failed"),
        ],
        updated_at=T + timedelta(seconds=6),
        version="etag-1",
    )


def rich_deferral() -> DeferralDocument:
    return DeferralDocument(
        id="deferred:o-1",
        order_id="o-1",
        entries=[
            DeferredEntry(
                sequence_number=7,
                message_id="m-7",
                message_type="PaymentNotification",
                reason=DeferralReason.ORDER_NOT_SUBMITTED,
                deferred_at=T,
                recorded_by="submission",
                updated_at=T,
            ),
            DeferredEntry(
                sequence_number=8,
                message_id="m-8",
                message_type="OrderCancelled",
                reason=DeferralReason.DEPENDENCY_UNAVAILABLE,
                deferred_at=T,
                recorded_by="sweep",
                rounds=2,
                status=EntryStatus.APPLIED,
                updated_at=T + timedelta(seconds=1),
                detail="done",
                notification_id="n-8",
                notification_digest="d-8",
                retry_due_at=T + timedelta(seconds=31),
                retry_token="t-8",
                orderless_alerted_at=T + timedelta(minutes=1),
                discarded_by="ops@contoso.example",
                discard_reason="refunded",
            ),
        ],
        updated_at=T + timedelta(seconds=1),
        rejected_at=T + timedelta(seconds=2),
        absent_checked_at=T + timedelta(seconds=3),
        rejected_sequence_number=42,
        refused_before=[40, 41],
        refused_notifications=[
            RefusedNotification(sequence_number=7, notification_id="n-7", dead_lettered_at=T + timedelta(seconds=4))
        ],
        refused_notifications_unlisted=2,
        version="e",
    )


def rich_health() -> DependencyHealth:
    return DependencyHealth(
        id="health:payment",
        order_id="dependency:payment",
        dependency="payment",
        state=CircuitState.HALF_OPEN,
        consecutive_failures=5,
        failure_weight=7,
        opened_at=T,
        probe_after=T + timedelta(seconds=30),
        reopens=1,
        probes_granted=1,
        last_closed_at=T - timedelta(hours=1),
        last_outage_started_at=T - timedelta(hours=2),
        outage_alerted_for=T,
        recovery_alerted_for=T - timedelta(hours=2),
        outage_continued_to=T + timedelta(minutes=3),
        outage_reopenings=2,
        outage_settled_for=T,
        outage_paging_for=T + timedelta(minutes=4),
        updated_at=T,
        version="e2",
    )


STATE_DOCUMENT: dict[str, Any] = {
    "id": "o-1",
    "orderId": "o-1",
    "processState": "Compensating",
    "lockedBy": "o-1:c2",
    "completeBy": "2026-03-04T05:11:07.890123Z",
    "failureCount": 2,
    "attempt": 3,
    "replyTo": "replies",
    "currentStep": "charge-payment",
    "steps": {
        "reserve-inventory": {
            "status": "Succeeded",
            "agent": "inventory",
            "requestId": "o-1:reserve-inventory:1",
            "attempt": 1,
            "startedAt": "2026-03-04T05:06:07.890123Z",
            "finishedAt": "2026-03-04T05:06:08.890123Z",
            "result": {"reservationId": "r-9", "lines": [1, 2], "nested": {"ok": True, "none": None, "f": 1.5}},
            "error": None,
            "agents": None,  # a step recorded before the field: read back as None (not known)
        },
        "charge-payment": {
            "status": "Failed",
            "agent": "payment",
            "requestId": "o-1:charge-payment:3",
            "attempt": 3,
            "startedAt": "2026-03-04T05:06:09.890123Z",
            "finishedAt": None,
            "result": None,
            "error": "declined",
            "agents": ["payment-backup", "payment"],
        },
    },
    "compensation": [
        {
            "seq": 1,
            "step": "reserve-inventory",
            "agent": "inventory",
            "undoAction": "release",
            "data": {"reservationId": "r-9"},
            "attempt": 1,
            "at": "2026-03-04T05:06:10.890123Z",
            "outcome": "Undone",
            "outcomeAt": "2026-03-04T05:06:11.890123Z",
            "error": None,
            "undoResult": {"releaseId": "rel-1", "units": 2},
            "undoneBy": None,
        },
        {
            "seq": 2,
            "step": "charge-payment",
            "agent": "payment",
            "undoAction": "refund",
            "data": {"outcomeUnknown": True},
            "attempt": 3,
            "at": "2026-03-04T05:06:12.890123Z",
            "outcome": None,
            "outcomeAt": None,
            "error": None,
            "undoResult": None,
            "undoneBy": None,
        },
    ],
    "lastError": "charge-payment: declined",
    "payment": {
        "notificationId": "n-1",
        "amountCents": 1250,
        "currency": "EUR",
        "providerReference": "psp-7",
        "receivedAt": "2026-03-04T05:00:00.000000Z",
        "sequenceNumber": 42,
    },
    "outageWaitSince": "2026-03-03T05:06:07.890123Z",
    "paymentWaitSince": "2026-03-04T04:06:07.890123Z",
    "lastWrite": {"by": "o-1:2", "number": 3},
    "receivedOwed": "2026-03-04T03:06:07.890123Z",
    "submittedAs": 4711,
    "reviewDefault": {"reviewId": "o-1:2:charge-payment:review:1", "action": "retry"},
    "startsMissed": 2,
    "history": [
        {"at": "2026-03-04T05:06:07.890123Z", "event": "Received", "by": "submission", "detail": ""},
        {
            "at": "2026-03-04T05:06:13.890123Z",
            "event": "Compensating",
            "by": "o-1:1",
            "detail": "charge-payment failed",
        },
    ],
    "schemaVersion": 1,
    "updatedAt": "2026-03-04T05:06:13.890123Z",
}

DEFERRAL_DOCUMENT: dict[str, Any] = {
    "id": "deferred:o-1",
    "orderId": "o-1",
    "kind": "DeferredMessages",
    "entries": [
        {
            "sequenceNumber": 7,
            "messageId": "m-7",
            "messageType": "PaymentNotification",
            "reason": "OrderNotSubmitted",
            "deferredAt": "2026-03-04T05:06:07.890123Z",
            "recordedBy": "submission",
            "rounds": 0,
            "status": "Deferred",
            "updatedAt": "2026-03-04T05:06:07.890123Z",
            "detail": "",
            "notificationId": "",
            "notificationDigest": "",
            "retryDueAt": None,
            "retryToken": "",
            "orderlessAlertedAt": None,
            "discardedBy": "",
            "discardReason": "",
        },
        {
            "sequenceNumber": 8,
            "messageId": "m-8",
            "messageType": "OrderCancelled",
            "reason": "DependencyUnavailable",
            "deferredAt": "2026-03-04T05:06:07.890123Z",
            "recordedBy": "sweep",
            "rounds": 2,
            "status": "Applied",
            "updatedAt": "2026-03-04T05:06:08.890123Z",
            "detail": "done",
            "notificationId": "n-8",
            "notificationDigest": "d-8",
            "retryDueAt": "2026-03-04T05:06:38.890123Z",
            "retryToken": "t-8",
            "orderlessAlertedAt": "2026-03-04T05:07:07.890123Z",
            "discardedBy": "ops@contoso.example",
            "discardReason": "refunded",
        },
    ],
    "schemaVersion": 1,
    "updatedAt": "2026-03-04T05:06:08.890123Z",
    "rejectedAt": "2026-03-04T05:06:09.890123Z",
    "absentCheckedAt": "2026-03-04T05:06:10.890123Z",
    "rejectedSequenceNumber": 42,
    "refusedBefore": [40, 41],
    "refusedNotifications": [
        {"sequenceNumber": 7, "notificationId": "n-7", "deadLetteredAt": "2026-03-04T05:06:11.890123Z"}
    ],
    "refusedNotificationsUnlisted": 2,
}

HEALTH_DOCUMENT: dict[str, Any] = {
    "id": "health:payment",
    "orderId": "dependency:payment",
    "kind": "DependencyHealth",
    "dependency": "payment",
    "state": "half-open",
    "consecutiveFailures": 5,
    "failureWeight": 7,
    "openedAt": "2026-03-04T05:06:07.890123Z",
    "probeAfter": "2026-03-04T05:06:37.890123Z",
    "reopens": 1,
    "probesGranted": 1,
    "lastClosedAt": "2026-03-04T04:06:07.890123Z",
    "lastOutageStartedAt": "2026-03-04T03:06:07.890123Z",
    "outageAlertedFor": "2026-03-04T05:06:07.890123Z",
    "recoveryAlertedFor": "2026-03-04T03:06:07.890123Z",
    "outageContinuedTo": "2026-03-04T05:09:07.890123Z",
    "outageReopenings": 2,
    "outageSettledFor": "2026-03-04T05:06:07.890123Z",
    "outagePagingFor": "2026-03-04T05:10:07.890123Z",
    "schemaVersion": 1,
    "updatedAt": "2026-03-04T05:06:07.890123Z",
}

FRESH_DOCUMENTS: dict[str, dict[str, Any]] = {
    "state": {
        "id": "p",
        "orderId": "p",
        "processState": "Pending",
        "lockedBy": None,
        "completeBy": None,
        "failureCount": 0,
        "attempt": 0,
        "replyTo": None,
        "currentStep": None,
        "steps": {},
        "compensation": [],
        "lastError": None,
        "payment": None,
        "outageWaitSince": None,
        "paymentWaitSince": None,
        "lastWrite": None,
        "receivedOwed": None,
        "submittedAs": None,
        "reviewDefault": None,
        "startsMissed": 0,
        "history": [],
        "schemaVersion": 1,
        "updatedAt": "2026-03-04T05:06:07.890123Z",
    },
    "deferral": {
        "id": "deferred:p",
        "orderId": "p",
        "kind": "DeferredMessages",
        "entries": [],
        "schemaVersion": 1,
        "updatedAt": "2026-03-04T05:06:07.890123Z",
        "rejectedAt": None,
        "absentCheckedAt": None,
        "rejectedSequenceNumber": None,
        "refusedBefore": [],
        "refusedNotifications": [],
        "refusedNotificationsUnlisted": 0,
    },
    "health": {
        "id": "health:x",
        "orderId": "dependency:x",
        "kind": "DependencyHealth",
        "dependency": "x",
        "state": "closed",
        "consecutiveFailures": 0,
        "failureWeight": 0,
        "openedAt": None,
        "probeAfter": None,
        "reopens": 0,
        "probesGranted": 0,
        "lastClosedAt": None,
        "lastOutageStartedAt": None,
        "outageAlertedFor": None,
        "recoveryAlertedFor": None,
        "outageContinuedTo": None,
        "outageReopenings": 0,
        "outageSettledFor": None,
        "outagePagingFor": None,
        "schemaVersion": 1,
        "updatedAt": "2026-03-04T05:06:07.890123Z",
    },
}


# --- exactly the documents stored before -----------------------------------------------------------


def test_a_rich_state_record_has_exactly_the_document_stored_before() -> None:
    doc = to_document(rich_record())
    assert doc == STATE_DOCUMENT
    assert list(doc) == list(STATE_DOCUMENT)  # and the same key order
    assert list(doc["steps"]["reserve-inventory"]) == list(STATE_DOCUMENT["steps"]["reserve-inventory"])


def test_a_deferral_document_and_a_dependency_health_have_exactly_the_documents_stored_before() -> None:
    assert to_document(rich_deferral()) == DEFERRAL_DOCUMENT
    assert to_document(rich_health()) == HEALTH_DOCUMENT
    assert list(to_document(rich_health())) == list(HEALTH_DOCUMENT)


def test_a_deferral_entry_stored_before_its_newer_fields_reads_with_their_defaults() -> None:
    old = (
        "notificationId",
        "notificationDigest",
        "retryDueAt",
        "retryToken",
        "orderlessAlertedAt",
        "discardedBy",
        "discardReason",
    )
    stored_before = {
        **DEFERRAL_DOCUMENT,
        "entries": [{k: v for k, v in e.items() if k not in old} for e in DEFERRAL_DOCUMENT["entries"]],
    }
    entries = from_document(DeferralDocument, stored_before).entries
    assert [(e.notification_id, e.notification_digest) for e in entries] == [("", ""), ("", "")]
    assert [(e.retry_due_at, e.retry_token) for e in entries] == [(None, ""), (None, "")]
    assert [e.orderless_alerted_at for e in entries] == [None, None]
    assert [(e.discarded_by, e.discard_reason) for e in entries] == [("", ""), ("", "")]


def test_a_deferral_document_stored_before_its_waiting_messages_were_looked_for_reads_with_none() -> None:
    stored_before = {k: v for k, v in DEFERRAL_DOCUMENT.items() if k != "absentCheckedAt"}
    assert from_document(DeferralDocument, stored_before).absent_checked_at is None


def test_a_refusal_stored_before_it_named_its_message_reads_with_none_and_names_no_message() -> None:
    stored_before = {k: v for k, v in DEFERRAL_DOCUMENT.items() if k != "rejectedSequenceNumber"}
    doc = from_document(DeferralDocument, stored_before)
    assert doc.rejected_at is not None and doc.rejected_sequence_number is None
    assert not doc.refuses(42)


def test_a_deferral_document_stored_before_it_listed_refused_notifications_lists_none() -> None:
    old = ("refusedNotifications", "refusedNotificationsUnlisted")
    doc = from_document(DeferralDocument, {k: v for k, v in DEFERRAL_DOCUMENT.items() if k not in old})
    assert (doc.refused_notifications, doc.refused_notifications_unlisted) == ([], 0) and not doc.to_flag()


def test_a_compensation_entry_stored_before_it_kept_its_undo_answer_reads_with_none() -> None:
    stored_before = {
        **STATE_DOCUMENT,
        "compensation": [{k: v for k, v in e.items() if k != "undoResult"} for e in STATE_DOCUMENT["compensation"]],
    }
    assert [e.undo_result for e in from_document(StateRecord, stored_before).compensation] == [None, None]


def test_a_compensation_entry_stored_before_undone_by_hand_existed_reads_as_undone_by_the_app() -> None:
    stored_before = {
        **STATE_DOCUMENT,
        "compensation": [{k: v for k, v in e.items() if k != "undoneBy"} for e in STATE_DOCUMENT["compensation"]],
    }
    assert [e.undone_by for e in from_document(StateRecord, stored_before).compensation] == [None, None]


def test_a_state_document_stored_before_payment_waits_reads_as_not_waiting() -> None:
    stored_before = {k: v for k, v in STATE_DOCUMENT.items() if k != "paymentWaitSince"}
    assert from_document(StateRecord, stored_before).payment_wait_since is None


def test_a_health_document_stored_before_the_failure_weight_reads_with_none_counted() -> None:
    older = {k: v for k, v in HEALTH_DOCUMENT.items() if k != "failureWeight"}
    health = from_document(DependencyHealth, older)
    assert (health.consecutive_failures, health.failure_weight) == (5, 0)


def test_fresh_records_with_their_defaults_have_exactly_the_documents_stored_before() -> None:
    record = StateRecord(id="p", order_id="p", process_state=ProcessState.PENDING, updated_at=T)
    assert to_document(record) == FRESH_DOCUMENTS["state"]
    assert to_document(DeferralDocument.empty("p", T)) == FRESH_DOCUMENTS["deferral"]
    assert to_document(DependencyHealth.fresh("x", T)) == FRESH_DOCUMENTS["health"]


# --- round trips -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        rich_record(),
        rich_record().steps["reserve-inventory"],
        rich_record().compensation[0],
        rich_record().history[1],
        rich_record().payment,
        rich_deferral(),
        rich_deferral().entries[1],
        rich_health(),
        StateRecord(id="p", order_id="p", process_state=ProcessState.PENDING, updated_at=T),
        DeferralDocument.empty("p", T),
        DependencyHealth.fresh("x", T),
    ],
    ids=lambda record: type(record).__name__,
)
def test_every_record_type_round_trips_through_its_document(record: Any) -> None:
    back = from_document(type(record), to_document(record))
    expected = replace(record, version=None) if hasattr(record, "version") else record
    assert back == expected


def test_timestamps_come_back_as_utc_and_the_version_is_neither_written_nor_read() -> None:
    doc = to_document(rich_record())
    assert "version" not in doc
    back = from_document(StateRecord, {**doc, "version": "from-the-document", "_etag": "abc"})
    assert back.version is None  # stored() fills it from _etag, nothing else does
    assert back.payment is not None and back.payment.received_at == datetime(2026, 3, 4, 5, 0, tzinfo=UTC)
    assert back.payment.received_at.tzinfo is UTC
    assert stored(StateRecord, {**doc, "_etag": "abc"}).version == "abc"


def test_the_document_is_a_copy_changing_it_never_changes_the_record() -> None:
    record = rich_record()
    doc = to_document(record)
    doc["steps"]["reserve-inventory"]["result"]["nested"]["ok"] = False
    doc["history"].clear()
    assert record == rich_record()


def test_a_record_read_from_a_document_does_not_share_its_containers() -> None:
    doc = to_document(rich_record())
    back = from_document(StateRecord, doc)
    doc["steps"].clear()
    doc["compensation"].clear()
    assert set(back.steps) == {"reserve-inventory", "charge-payment"} and len(back.compensation) == 2


# --- tolerant reading ----------------------------------------------------------------------------------


def test_unknown_keys_are_ignored_and_missing_optional_keys_take_their_defaults() -> None:
    doc = {
        "id": "p",
        "orderId": "p",
        "processState": "Pending",
        "updatedAt": "2026-03-04T05:06:07.890123Z",
        "_etag": "x",
        "_ts": 1,
        "aFieldOfANewerWriter": {"anything": [1]},
    }
    record = from_document(StateRecord, doc)
    assert record == StateRecord(id="p", order_id="p", process_state=ProcessState.PENDING, updated_at=T)
    assert record.steps == {} and record.history == [] and record.schema_version == 1
    step = {**STATE_DOCUMENT["steps"]["charge-payment"], "extra": 1}
    del step["finishedAt"], step["result"]
    assert from_document(StepState, step).finished_at is None


def test_timestamps_are_read_in_any_offset_and_integral_numbers_as_integers() -> None:
    doc = {**FRESH_DOCUMENTS["state"], "updatedAt": "2026-03-04T07:06:07.890123+02:00", "attempt": 2.0}
    record = from_document(StateRecord, doc)
    assert record.updated_at == T and record.updated_at.tzinfo is UTC
    assert record.attempt == 2 and isinstance(record.attempt, int)


# --- bad documents are named by their field -----------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda d: d.pop("updatedAt"), "updatedAt", "missing"),
        (lambda d: d.update(processState="Nope"), "processState", "expected one of"),
        (lambda d: d.update(failureCount="2"), "failureCount", "expected an integer, got '2'"),
        (lambda d: d.update(failureCount=True), "failureCount", "expected an integer"),
        (lambda d: d.update(lockedBy=5), "lockedBy", "expected a string, got 5"),
        (lambda d: d.update(completeBy="2026-03-04T05:06:07"), "completeBy", "UTC offset or Z"),
        (lambda d: d.update(completeBy="yesterday"), "completeBy", "not a timestamp"),
        (lambda d: d["steps"]["charge-payment"].update(startedAt=5), "steps.charge-payment.startedAt", "timestamp"),
        (lambda d: d["steps"]["charge-payment"].pop("agent"), "steps.charge-payment.agent", "missing"),
        (lambda d: d["compensation"][1].update(seq=None), "compensation.1.seq", "expected an integer, got None"),
        (lambda d: d["payment"].update(amountCents=1.5), "payment.amountCents", "expected an integer"),
        (lambda d: d.update(history={}), "history", "expected a JSON array"),
        (lambda d: d.update(steps=[]), "steps", "expected a JSON object"),
        (lambda d: d["steps"].update(x="not a step"), "steps.x", "expected a JSON object"),
    ],
)
def test_a_bad_document_raises_an_error_naming_the_field(change: Any, field: str, problem: str) -> None:
    doc = to_document(rich_record())
    change(doc)
    with pytest.raises(DocumentError) as caught:
        from_document(StateRecord, doc)
    assert caught.value.field == field
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"invalid StateRecord document: field {field}: ")
    assert isinstance(caught.value, ValueError)


def test_a_document_that_is_not_an_object_is_named_as_such() -> None:
    with pytest.raises(DocumentError, match=r"invalid DependencyHealth document: the document: expected a JSON"):
        from_document(DependencyHealth, ["not", "an", "object"])  # type: ignore[arg-type]


# --- what the mapping refuses to write or to map ---------------------------------------------------------


def test_a_value_without_a_json_form_is_refused_on_write() -> None:
    step = replace(rich_record().steps["charge-payment"], result={"when": {1, 2}})
    with pytest.raises(TypeError, match="set value has no JSON form"):
        to_document(step)


@dataclass(frozen=True, kw_only=True)
class Unsupported:
    tags: set[str]


def test_a_field_type_the_mapping_does_not_know_is_refused() -> None:
    with pytest.raises(TypeError, match="unsupported field type"):
        from_document(Unsupported, {"tags": []})


def test_camel_case_keys() -> None:
    assert [camel(n) for n in ("id", "order_id", "last_outage_started_at", "at")] == [
        "id",
        "orderId",
        "lastOutageStartedAt",
        "at",
    ]
