"""What the simulation keeps of the state container at the end: the fields the report reads, and
each document's size, not the documents (every order's final record, history included)."""

from __future__ import annotations

import json

from localrun.simulation import report_fields


def test_a_state_document_is_reduced_to_the_fields_the_report_reads():
    document = {
        "id": "o1",
        "orderId": "o1",
        "processState": "Error",
        "lastError": "escalated: waited out the outage (by the bound)",
        "replyTo": "submitter-1-statuses",
        "attempt": 2,
        "completeBy": "2026-01-01T09:00:00Z",
        "payment": {"notificationId": "n-1", "amountCents": 1200, "currency": "EUR"},
        "history": [{"event": "Received", "by": "starter", "at": "2026-01-01T08:00:00Z"}] * 20,
        "steps": {"reserve-inventory": {"status": "Succeeded"}},
        "_etag": '"0000"',
    }
    kept = report_fields(document)
    assert kept == {
        "orderId": "o1",
        "processState": "Error",
        "lastError": "escalated: waited out the outage (by the bound)",
        "replyTo": "submitter-1-statuses",
        "attempt": 2,
        "completeBy": "2026-01-01T09:00:00Z",
        "payment": {"notificationId": "n-1"},
    }
    assert len(json.dumps(kept)) < len(json.dumps(document)) / 5


def test_a_document_that_is_not_an_order_state_keeps_nothing_the_report_would_count():
    assert report_fields({"id": "health-payment", "kind": "DependencyHealth", "open": False}) == {}
    assert report_fields({"orderId": "o2", "processState": "Processed", "payment": None}) == {
        "orderId": "o2",
        "processState": "Processed",
    }
