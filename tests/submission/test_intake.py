"""Submission through the registered ``submit_order`` function, against the Cosmos protocol server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from contracts.names import OPERATOR_ALERTS_QUEUE, ORDERS_QUEUE
from contracts.store_retry import ROUND_PROPERTY
from domain.states import ProcessState
from orchestrators.names import DELIVER_ALERT, SCHEDULER
from submission.store_outage import STORE_RETRY_DELAYS
from tests.contexts import context_with
from tests.fakes import (
    FakeReceivedMessage,
    RecordingActions,
    RecordingClient,
    RecordingSender,
    StateStoreThatFails,
)
from tests.submission.corpus import MALFORMED, order

pytestmark = pytest.mark.cosmos


def submit(functions: dict[str, Any], body: Any, client: RecordingClient | None = None) -> RecordingActions:
    """Calls the registered trigger the way the host does (the durable-client middleware's inner
    function gets the client object the host would build)."""
    actions = RecordingActions()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=FakeReceivedMessage.of(body), message_actions=actions, client=client or RecordingClient()))
    return actions


@pytest.mark.parametrize(("case", "body", "reason", "word"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_message_is_dead_lettered_with_a_reason_naming_the_problem(
    functions, app_context, case, body, reason, word
):
    actions = submit(functions, body)
    kind, details = actions.only
    assert kind == "deadletter"
    assert details["reason"] == reason
    assert word in details["description"]
    assert list(app_context.states._c.read_all_items()) == []  # nothing written
    assert list(app_context.orders._c.read_all_items()) == []


def test_corpus_has_at_least_twenty_cases():
    assert len(MALFORMED) >= 20


def test_new_order_writes_order_and_its_record_claimed_then_starts(functions, app_context, sender):
    client = RecordingClient()
    actions = submit(functions, order(), client)
    assert actions.only[0] == "complete"
    stored = app_context.orders.get("ord-1")
    assert stored["totalCents"] == 2500
    record = app_context.states.get("ord-1")
    # the fast path created it claimed for attempt 1 (tests/submission/test_fast_path_claim.py)
    assert record.process_state is ProcessState.PROCESSING
    assert record.locked_by == "ord-1:1"
    assert record.reply_to == "client-statuses"
    assert [e.event for e in record.history] == ["Received", "Claimed"]
    assert client.attempts == [(SCHEDULER, "ord-1:1", "ord-1", 1)]
    # the attempt's plan: the order as stored, nothing done yet, this app's settings
    [plan] = client.plans
    assert plan["order"] == stored and (plan["completed"], plan["outageWait"]) == ({}, False)
    assert plan["stepTimeoutSeconds"] == app_context.settings.step_timeout.total_seconds()
    assert [b["status"] for b in sender.bodies("client-statuses")] == ["Received"]


def test_exact_duplicate_completes_and_writes_nothing(functions, app_context):
    submit(functions, order())
    before = app_context.states.get("ord-1")
    client = RecordingClient()
    actions = submit(functions, order(), client)
    assert actions.only[0] == "complete"
    after = app_context.states.get("ord-1")
    assert after.version == before.version
    assert client.started == []


def test_conflicting_duplicate_is_dead_lettered_alerted_and_the_order_kept(functions, app_context, sender):
    submit(functions, order())
    actions = submit(functions, order(shipTo="2 Other St"))
    kind, details = actions.only
    assert (kind, details["reason"]) == ("deadletter", "ConflictingOrderData")
    assert app_context.orders.get("ord-1")["shipTo"] == "1 Main St"
    alerts = sender.bodies(OPERATOR_ALERTS_QUEUE)
    assert [a["kind"] for a in alerts] == ["ConflictingOrderData"]


def test_each_conflicting_content_has_its_own_alert_and_a_redelivery_raises_none(functions, app_context, sender):
    """The ``ConflictingOrderData`` alert is discriminated by the conflicting content (a digest of the order as it
    would be stored): two conflicting submissions with other data are two alerts (before the sequence number was,
    one id for the order: duplicate detection kept the first), the same message delivered again (or the same
    content sent again) raises none while the problem lasts (an alert mark: tests/submission/
    test_redteam47_conflict_storm.py)."""
    submit(functions, order())
    fn = functions["submit_order"].func.client_function
    first = FakeReceivedMessage.of(order(shipTo="2 Other St"))
    for message in (first, first, FakeReceivedMessage.of(order(replyTo="other-statuses"))):
        asyncio.run(fn(message=message, message_actions=RecordingActions(), client=RecordingClient()))
    ids = [a["alertId"] for a in sender.bodies(OPERATOR_ALERTS_QUEUE)]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert all(i.startswith("alert:ConflictingOrderData:ord-1:") for i in ids)


def test_a_conflict_whose_alert_cannot_be_sent_is_dead_lettered_and_its_alert_handed_to_the_courier(
    functions, app_context, sender
):
    """Expected: the conflicting duplicate is dead-lettered at once and its ``ConflictingOrderData`` alert, whose
    send failed, handed to the alert courier (``deliver_alert_v1``) under the alert's id, before the settlement.
    Before: the failed send abandoned the message (Service Bus redelivers it; five failures in a row wore it out
    ``MaxDeliveryCountExceeded``, the conflict never alerted)."""
    submit(functions, order())
    context_with(app_context, sender=RecordingSender(missing={OPERATOR_ALERTS_QUEUE}))
    client = RecordingClient()
    actions = submit(functions, order(shipTo="2 Other St"), client)
    kind, details = actions.only
    assert (kind, details["reason"]) == ("deadletter", "ConflictingOrderData")
    [(name, instance, handed)] = client.started
    assert name == DELIVER_ALERT
    # its id: the conflicting content's digest (tests/submission/test_redteam47_conflict_storm.py)
    digest = str(instance).rsplit(":", 1)[1]
    assert str(instance).startswith("alert:ConflictingOrderData:ord-1:") and len(digest) == 32 and int(digest, 16) >= 0
    assert (handed["alert"]["alertId"], handed["alert"]["kind"]) == (instance, "ConflictingOrderData")


def test_crash_between_the_two_writes_is_repaired_when_the_message_is_handled_again(functions, app_context, sender):
    states = StateStoreThatFails(app_context.states, "create")  # the state record's write fails
    ctx = context_with(app_context, states=states)
    actions = submit(functions, order())
    assert actions.only[0] == "complete"  # handled again later: the copy (submission/store_outage.py)
    assert ctx.orders.get("ord-1") is not None  # half-written...
    assert ctx.states.get("ord-1") is None
    [(queue, copy)] = sender.sent
    assert queue == ORDERS_QUEUE and copy.application_properties[ROUND_PROPERTY] == 1
    states.failing.clear()
    actions = RecordingActions()
    fn = functions["submit_order"].func.client_function
    asyncio.run(fn(message=FakeReceivedMessage.from_sent(copy), message_actions=actions, client=RecordingClient()))
    assert actions.only[0] == "complete"
    assert ctx.states.get("ord-1") is not None


def test_store_unavailable_hands_the_message_to_a_later_copy_not_to_an_immediate_redelivery(
    functions, app_context, sender, clock
):
    context_with(app_context, states=StateStoreThatFails(app_context.states, "get"))
    assert submit(functions, order()).only[0] == "complete"
    [(queue, copy)] = sender.sent
    assert queue == ORDERS_QUEUE
    assert json.loads(copy.body) == order()
    assert copy.scheduled_enqueue_time == clock.now() + STORE_RETRY_DELAYS[0]


def test_pending_cap_rejects_new_orders_with_a_status_and_writes_nothing(functions, app_context, sender):
    from settings import Settings

    ctx = context_with(app_context, settings=Settings.from_env({}, MAX_PENDING="1", MAX_IN_FLIGHT="1"))
    submit(functions, order(orderId="a"))  # claimed: Processing (in-flight 1 of 1)
    submit(functions, order(orderId="b"))  # stays Pending: in-flight cap reached
    ctx.counts.clear()
    actions = submit(functions, order(orderId="c"))
    assert actions.only[0] == "complete"
    assert ctx.states.get("c") is None and ctx.orders.get("c") is None
    rejected = [b for b in sender.bodies("client-statuses") if b["orderId"] == "c"]
    assert [b["status"] for b in rejected] == ["Rejected"]
    waiting = ctx.states.get("b")
    assert waiting is not None and waiting.process_state is ProcessState.PENDING


def test_start_failure_after_a_claim_leaves_the_record_for_the_supervisor(functions, app_context, clock):
    actions = submit(functions, order(), RecordingClient(fail_start=True))
    assert actions.only[0] == "complete"
    record = app_context.states.get("ord-1")
    assert record.process_state is ProcessState.PROCESSING
    assert record.complete_by == clock.now() + app_context.settings.start_grace
    from domain.transitions import is_expired

    assert not is_expired(record, clock.now())
    assert is_expired(record, record.complete_by)  # the supervisor will find it then


def test_dead_letter_description_is_json_free_text(functions, app_context):
    actions = submit(functions, b"{")
    _, details = actions.only
    with pytest.raises(json.JSONDecodeError):
        json.loads(details["description"])
