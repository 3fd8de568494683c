"""The invariants are not decoration: break the app on purpose and the runner reports it."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, run_simulation

pytestmark = pytest.mark.e2e
PROFILES = Path(__file__).resolve().parents[2] / "examples" / "profiles"


def run(
    profile: str,
    orders: int = 100,
    cosmos: dict[str, Any] | None = None,
    *,
    overlay: dict[str, Any] | None = None,
    horizon: timedelta = timedelta(hours=8),
    seed: int = 11,
) -> dict[str, Any]:
    """``cosmos``: fault keys laid over the profile's ``cosmos`` section (to make the fault a mutation
    needs common enough that the run cannot miss it by chance); ``overlay``: the same for any section (a
    mapping laid over the profile's, anything else replacing it)."""
    data = json.loads((PROFILES / f"{profile}.json").read_text(encoding="utf-8"))
    for key, value in {**(overlay or {}), **({"cosmos": cosmos} if cosmos else {})}.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    config = SimulationConfig(orders=orders, seed=seed, profile=Profile.parse(data), horizon=horizon)
    return build_report(run_simulation(config))


def test_without_idempotency_keys_a_crashed_agent_charges_twice(monkeypatch):
    """Each retry of a call gets a new key: the agent-crash profile's redeliveries then repeat
    side effects, and the ledger check counts them."""
    import itertools

    from order_agents import runtime

    counter = itertools.count()
    real = runtime.RemoteCall  # type: ignore[attr-defined]

    def fresh_key(*args: Any, **kwargs: Any) -> Any:
        call = real(*args, **kwargs)
        return real(**{**call.__dict__, "idempotency_key": f"{call.idempotency_key}#{next(counter)}"})

    monkeypatch.setattr(runtime, "RemoteCall", fresh_key)
    report = run("agent-crash")
    assert report["invariants"]["duplicate_side_effects"] > 0


def test_without_the_forward_key_fence_a_slow_charge_is_kept_after_compensation(monkeypatch):
    """Undos no longer fence their forward key: a forward call still in flight when its undo ran
    takes effect after it (the undo found nothing, the order is Compensated, the money is kept)."""
    import dataclasses

    from order_agents import runtime

    real = runtime.RemoteCall  # type: ignore[attr-defined]
    monkeypatch.setattr(runtime, "RemoteCall", lambda *a, **k: dataclasses.replace(real(*a, **k), fences_key=None))
    report = run("slow-remote-calls")
    assert report["invariants"]["kept_after_compensation"] > 0
    assert report["recoveries"]["fenced_forward_calls"] == 0


def test_without_re_read_and_owed_notifications_a_lost_escalation_is_silent(monkeypatch):
    """The supervisor treats a write whose response was lost as not written, and nothing delivers
    what a failure write owes: orders end Error with no alert and no Failed status."""
    from adapters.cosmos.state_store import update_once
    from supervisor import compensation_rounds, recovery
    from supervisor import run as supervisor_run

    def plain(ctx: Any, record: Any, change: Any) -> Any:
        return update_once(ctx.states, record, change)

    monkeypatch.setattr(recovery, "write_or_reread", plain)
    monkeypatch.setattr(compensation_rounds, "write_or_reread", plain)
    monkeypatch.setattr(supervisor_run, "deliver_due", lambda ctx, cursors=None: 0)
    # At the profile's 3 % a run of ~100 escalations loses the response of ~3 of their writes, so
    # whether one is lost depends on the order of every Cosmos call before it; at 20 % some always are.
    report = run("cosmos-lost-responses", cosmos={"lost_response_rate": 0.2})
    assert report["invariants"]["silent_failures"] > 0


def test_with_re_read_and_owed_notifications_no_escalation_is_silent_at_that_loss_rate():
    """The control for the test above: the same run with the app as it is alerts every escalation."""
    report = run("cosmos-lost-responses", cosmos={"lost_response_rate": 0.2})
    assert report["injected_faults"]["cosmos_responses_lost"] > 0
    assert report["invariants"]["silent_failures"] == 0


def test_without_releasing_a_rejected_orders_notifications_they_are_stranded(monkeypatch):
    """Issue 11 finding 6: before the fix an order rejected by admission control left its deferred
    PaymentNotification waiting for an order that was never coming; stranded_messages counts them. Here the
    refusal is told (`Rejected`, `OrderRejected`) but never written on the order's deferral document, so neither
    the refusal, nor the notifications' looks again, nor the peek sweep dead-letters them: they wait, and after
    two hours the peek sweep alerts them as payments for orders never submitted (`PaymentWithoutOrder`), which
    is no excuse for the notifications of an order the app refused."""
    monkeypatch.setattr("deferral.recovery.rejected", lambda doc, now, sequence_number: doc)
    report = run("admission-rejections")
    assert report["final_states"]["Rejected"] > 0 and report["alerts"].get("PaymentWithoutOrder", 0) > 0
    assert report["invariants"]["stranded_messages"] > 0


def test_without_the_couriers_look_for_the_record_a_stale_rejected_follows_the_accepted_submission(monkeypatch):
    """The status courier tells a refusal's ``Rejected`` whatever happened since (the red team's finding): a refused
    order submitted again and accepted while its submitter's queue was full hears ``Rejected`` after its record was
    written; ``rejected_after_accepted`` counts them, and nothing is superseded."""
    monkeypatch.setattr("activities.scheduler_steps.refusal_superseded", lambda ctx, data: False)
    report = run("refused-then-accepted")
    assert report["invariants"]["rejected_after_accepted"] > 0
    assert report["statuses_superseded"] == 0


def test_without_saying_the_owed_received_first_a_full_queue_hears_completed_before_it(monkeypatch):
    """The ``publish_status`` activity no longer says a ``Received`` the record owes before the status it sends: with
    submitter 1's queue full for 15 minutes, ``Completed`` retried on the scheduler's timers reaches it first once
    the queue drains, and ``statuses_before_received`` counts those orders."""
    monkeypatch.setattr("activities.scheduler_steps.say_before_status", lambda *args: True)
    report = run("status-queue-refusing")
    assert report["invariants"]["statuses_before_received"] > 0
    assert report["invariants"]["missing_statuses"] == 0  # each heard Received in the end: the order is what broke


# --- one mutant for each invariant the tests above do not break (docs/testing.md lists the test of each) ------------
# Small runs (at most 15 orders, a few seconds each): the mutation is common enough that they cannot miss it. The
# same runs of the app as it is (each test's profile, orders and seed, unpatched) held every invariant when they were
# written (checked by hand, 2026-12-07), and tests/e2e/test_fault_profiles.py checks each profile's runs of the app.


def test_without_logging_a_completed_steps_undo_a_compensated_order_keeps_its_reservation(monkeypatch):
    """A compensation entry not recorded: a step's completion is written without its compensation log entry, so
    the round undoes nothing of it and the order ends ``Compensated`` holding its stock (reserved, never
    released); the ledger check counts it."""
    from domain import transitions

    def unlogged(record: Any, owner: str, step: str, result: Any, deadline: Any, now: Any) -> Any:
        return transitions.complete_step(record, owner, step, result, deadline, now)

    monkeypatch.setattr("activities.scheduler_steps.complete_step_logged", unlogged)
    report = run("permanent-errors", orders=15)
    assert report["final_states"]["Compensated"] > 0
    assert report["invariants"]["unbalanced_compensations"] > 0


def test_without_the_release_alert_a_compensated_prepaid_order_keeps_the_customers_money(monkeypatch):
    """A prepayment not released: ``finish_compensation`` no longer sees the uncaptured prepayment, so the
    ``PrepaymentToRelease`` alert of an order compensated after its notification was applied (its capture refused
    for good: the prepaid order has no backup provider) never goes out."""
    monkeypatch.setattr("domain.compensation.uncaptured_prepayment", lambda record: None)
    overlay = {"orders": {"prepaid_rate": 1.0}, "remote": {"payment": {"permanent_error_rate": 0.5}}}
    report = run("happy-path", orders=12, overlay=overlay)
    assert "PrepaymentToRelease" not in report["alerts"]
    assert report["invariants"]["unreleased_prepayments"] > 0


def test_with_a_reply_queue_kept_from_the_last_status_sent_statuses_reach_other_submitters(monkeypatch):
    """A status sent to the wrong queue: ``publish_status`` sends each status to the queue of the status it sent
    before (a reply queue cached across orders). With three submitters, some hear of orders they never
    submitted."""
    import notifications.status as status

    real = status.publish_status
    last: list[str | None] = []

    def cached_queue(sender: Any, *, reply_to: str | None, **kwargs: Any) -> Any:
        queue = last[-1] if last and last[-1] else reply_to
        last.append(reply_to)
        return real(sender, reply_to=queue, **kwargs)

    monkeypatch.setattr(status, "publish_status", cached_queue)
    report = run("happy-path", orders=10, overlay={"reply_queues": 3})
    assert report["invariants"]["misrouted_statuses"] > 0


def _sent_without_sending(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The mutant: ``publish_status`` answers the status ``name`` sent without sending it."""
    import notifications.status as status

    real = status.publish_status

    def swallowed(*args: Any, **kwargs: Any) -> Any:
        return status.Delivery.SENT if kwargs.get("status") == name else real(*args, **kwargs)

    monkeypatch.setattr(status, "publish_status", swallowed)


def test_with_the_completed_status_answered_sent_but_not_sent_the_submitters_never_hear_how_orders_ended(monkeypatch):
    """A status not sent: ``publish_status`` answers ``Completed`` sent without sending it (as a workload order's,
    where tests/localrun/test_redteam_inject_raw.py swallows an injected order's)."""
    _sent_without_sending(monkeypatch, "Completed")
    report = run("happy-path", orders=8)
    assert report["final_states"]["Processed"] == 8
    assert report["invariants"]["missing_statuses"] == 8


def test_statuses_dropped_before_a_queue_began_refusing_are_not_excused_by_its_refusal(monkeypatch):
    """Red team of the runner's excuses: the same mutant (``Completed`` answered sent, never sent), and submitter 1's
    queue deleted for good at 20 s, after its first orders ended. The app met the refusal for the orders still
    running (``ReplyQueueUnavailable``, alerted): their statuses cannot arrive. Before, every order of that queue
    was excused, and ``missing_statuses`` counted only submitter 2's 6 orders: the ``Completed`` dropped while the
    queue still took sends was hidden by a refusal that came after it (``localrun/report.py``,
    ``_unreachable_orders``)."""
    _sent_without_sending(monkeypatch, "Completed")
    refusing = {"refusing": [{"submitter": 1, "error": "not_found", "start_s": 20}]}
    report = run("happy-path", orders=12, overlay={"reply_queues": 2, "status_queues": refusing})
    assert report["final_states"]["Processed"] == 12
    assert report["alerts"].get("ReplyQueueUnavailable", 0) > 0  # the queue is unreachable at the end, alerted
    assert report["invariants"]["missing_statuses"] > 6  # submitter 2's 6, and submitter 1's that ended before


def test_a_rejected_dropped_before_its_queue_began_refusing_is_not_excused_by_its_refusal(monkeypatch):
    """The same for ``lost``: a refused order (``OrderRejected`` alerted) counts as rejected without its ``Rejected``
    only when the app met its queue's refusal for it. The mutant answers ``Rejected`` sent without sending it, and
    submitter 1's queue is deleted for good at 30 s: before, its refused orders (10 of 18) counted rejected, the
    queue's refusal standing in for a status the app dropped without trying it."""
    _sent_without_sending(monkeypatch, "Rejected")
    refusing = {"refusing": [{"submitter": 1, "error": "not_found", "start_s": 30}]}
    report = run("admission-rejections", orders=40, overlay={"reply_queues": 2, "status_queues": refusing})
    assert report["alerts"].get("ReplyQueueUnavailable", 0) > 0  # the queue is unreachable at the end, alerted
    assert report["alerts"]["OrderRejected"] > 0
    assert report["invariants"]["lost"] == report["alerts"]["OrderRejected"]  # every refused order, told nothing


def test_with_a_store_failure_taken_for_done_an_order_is_lost(monkeypatch):
    """An error swallowed: an orders message that met a Cosmos DB failure is completed instead of handled again
    later (``retry_later``): nothing recorded, nothing dead-lettered, the order is gone."""
    from adapters.servicebus.settlement import Settlement
    from submission.result import IntakeResult

    monkeypatch.setattr(
        "submission.intake.retry_later", lambda ctx, message, kind, why, **kw: IntakeResult(Settlement.complete())
    )
    report = run("cosmos-throttling", orders=15)
    assert report["invariants"]["lost"] > 0


def test_with_payment_notifications_completed_unread_they_are_unmatched(monkeypatch):
    """A notification dropped: the orders trigger completes every ``PaymentNotification`` without applying,
    deferring or dead-lettering it. The prepaid orders wait for their payment in vain (``RetriesExhausted``)."""
    from adapters.servicebus.settlement import Settlement
    from contracts.messages import PaymentNotification
    from submission import intake
    from submission.result import IntakeResult

    def dropped(ctx: Any, note: Any, message: Any, owed: Any) -> IntakeResult:
        return IntakeResult(Settlement.complete())

    monkeypatch.setitem(intake.HANDLERS, "PaymentNotification", (PaymentNotification, dropped))
    report = run("prepaid-notifications", orders=8)
    assert report["invariants"]["unmatched_notifications"] > 0


def test_with_state_writes_made_unconditionally_a_write_lands_over_a_version_it_never_read(monkeypatch):
    """A write made unconditionally: the state store's replace drops its ``_etag`` condition. Payment
    notifications applied at the same instant as the scheduler's writes (concurrent-notifications) then overwrite
    each other instead of losing the race with a 412; the write audit counts the writes over versions Cosmos had
    already replaced (and the payments so overwritten are unmatched)."""
    from adapters.cosmos import state_store
    from adapters.cosmos.documents import document_of, stored
    from adapters.cosmos.errors import mapped_errors
    from domain.records import StateRecord

    def unconditional(self: Any, record: StateRecord) -> StateRecord:
        with mapped_errors(record.id):
            doc = self._c.replace_item(record.id, document_of(record))  # no etag, no match condition
        written: StateRecord = self._remember(stored(StateRecord, doc))
        return written

    monkeypatch.setattr(state_store.CosmosStateStore, "replace", unconditional)
    report = run("concurrent-notifications", orders=15)
    assert report["invariants"]["stale_writes"] > 0
    assert any("never returned" in s for s in report["invariant_examples"]["stale_writes"])


def test_without_the_owners_fence_an_instance_started_late_writes_over_the_record_it_lost(monkeypatch):
    """A fence removed: ``ensure_owner`` no longer checks ``lockedBy``. An instance whose start the Durable backend
    recorded late (tests/localrun/test_late_starts.py: released uncounted by the supervisor, the record claimed
    again by a new instance) starts all the same and, no longer fenced at its first write, writes over the record
    the supervisor released; the write audit counts each write by an instance that did not hold ``lockedBy``."""
    monkeypatch.setattr("domain.transitions.ensure_owner", lambda record, owner: None)
    overlay = {"durable": {"late_start_rate": 0.5, "late_start_ms": [50_000, 100_000]}}
    report = run("happy-path", orders=12, overlay=overlay, seed=1)
    assert any("wrote while lockedBy" in s for s in report["invariant_examples"]["stale_writes"])


def test_without_the_supervisors_scan_an_order_whose_reply_was_lost_is_never_finished(monkeypatch):
    """An expired attempt not recovered: the supervisor's scan finds nothing, so an order whose agent reply was
    lost stays ``Processing``. The run is cut at one hour (the same run of the app as it is ends every order
    well within it)."""
    from supervisor.scan import ScanResult

    monkeypatch.setattr("supervisor.run.scan_expired", lambda *args: ScanResult([], 0.0, 0, False, False, False))
    report = run("lost-replies", orders=10, horizon=timedelta(hours=1))
    assert report["final_states"].get("Processing", 0) > 0
    assert report["invariants"]["non_terminal"] > 0


def test_a_discarded_payment_an_order_took_is_counted_on_the_evidence_of_a_real_discard():
    """``discarded_payments_applied`` has no one-patch mutant: a discarded notification is dead-lettered, so no
    submission can apply it afterwards (what the invariant guards is a race inside the discard, docs/deferral.md).
    So the evidence of a real run is edited instead: the operator's discard of an orderless payment
    (tests/localrun/test_operator_discards_orderless.py), its order's record then made to hold that payment."""
    from tests.localrun.test_operator_discards_orderless import run as ghost

    report, result = ghost(discard=True)
    assert report["invariants"]["discarded_payments_applied"] == 0
    [doc] = [d for d in result.states if d.get("orderId") == "ord-ghost" and "processState" in d]
    doc["payment"] = {"notificationId": "pay-ghost"}
    assert build_report(result)["invariants"]["discarded_payments_applied"] == 1


def test_with_client_cancellations_completed_unread_their_submitters_never_hear_of_them(monkeypatch):
    """A cancellation dropped: the orders trigger completes every ``CancelOrder`` without reading its order, so a
    cancellation is neither taken (``Compensating``) nor refused (``CancellationRejected``). Before
    ``missing_statuses`` counted such a cancellation, every invariant held: the orders end ``Processed`` with
    ``Received`` and ``Completed`` heard (tests/localrun/test_report_cancellations.py)."""
    from adapters.servicebus.settlement import Settlement
    from contracts.messages import CancelOrder
    from submission import intake
    from submission.result import IntakeResult

    def dropped(ctx: Any, cancel: Any, message: Any, owed: Any) -> IntakeResult:
        return IntakeResult(Settlement.complete())

    monkeypatch.setitem(intake.HANDLERS, "CancelOrder", (CancelOrder, dropped))
    report = run("cancellations", orders=12, overlay={"orders": {"cancel_rate": 0.6}})
    assert report["invariants"]["missing_statuses"] > 0
    assert all("CancelOrder neither taken" in s for s in report["invariant_examples"]["missing_statuses"])
