"""Red team: hostile lines injected on ``orders`` through the whole runner (``--inject-raw``), drawn by family
from the run's own workload (``hostile_lines.py``: payments for unknown and for the run's orders, right and wrong
amounts, other currencies, twice; cancellations before, during and after an order; duplicate submissions with
other data and other or missing status queues; forged ``RetryDeferred``; bodies that are not JSON, huge, deep or
of the wrong types; MessageIds the app and the workload use). The rule: no line makes the report count an
invariant violation unless the app mishandled it, and the app settles every line (completed, dead-lettered with
a reason, or deferred for an order never submitted with a ``PaymentWithoutOrder`` alert naming it). A few lines
a run keep the suite short; ``REDTEAM_INJECT_RAW_RUNS=N`` runs N seeds of every family on two profiles."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from contracts.names import ORDERS_QUEUE
from localrun import orderless
from localrun.orderless import sent_as
from localrun.profile import Profile
from localrun.report import build_report
from localrun.simulation import SimulationConfig, SimulationResult, run_simulation
from localrun.workload import read_raw
from tests.localrun.hostile_lines import FAMILIES, forged_retries, submitted, workload_of

pytestmark = pytest.mark.cosmos

FAST = {"ORDERLESS_PAYMENT_ALERT_MINUTES": "30"}
PROFILES = Path(__file__).resolve().parents[2] / "examples" / "profiles"


def profile(name: str) -> Profile:
    return Profile.parse(json.loads((PROFILES / f"{name}.json").read_text()))


def run(lines: list[dict[str, Any]], orders: int = 5, seed: int = 1, name: str = "happy-path") -> SimulationResult:
    config = SimulationConfig(orders=orders, seed=seed, profile=profile(name), raw_lines=lines, settings=FAST)
    return run_simulation(config)


def unsettled(result: SimulationResult, lines: list[dict[str, Any]]) -> list[str]:
    """The injected lines the app left neither completed, dead-lettered with a reason, nor deferred for an order
    never submitted with an operator told of it (a line's store-retry copy stands for it)."""
    ids = {str(line.get("message_id") or f"raw-{n + 1}") for n, line in enumerate(lines)}
    told = orderless.told(result.broker)
    left = []
    for message in result.broker.contents(ORDERS_QUEUE):
        line_of = sent_as(message.message_id, message.application_properties)
        if line_of in ids and int(message.sequence_number) not in told:
            left.append(f"{message.message_id}: {message.state}")
    left += [f"{d.message_id}: dead-lettered without a reason" for d in result.broker.dead_letters() if not d.reason]
    return left


def check(result: SimulationResult, lines: list[dict[str, Any]]) -> list[str]:
    report = build_report(result)
    problems = [f"{k} {v}: {report['invariant_examples'].get(k)}" for k, v in report["invariants"].items() if v]
    problems += [f"function failed: {f}" for f in report["function_failure_examples"] if "submit_order" in f]
    return problems + unsettled(result, lines)


def new_order(
    order_id: str, message_id: str, like: str = "ord-00001", orders: int = 3
) -> tuple[dict[str, Any], list[str]]:
    """A valid order the workload does not have (the data of its order ``like``), sent as a line, and the run's
    report and ``check``'s problems."""
    body = {**submitted(workload_of(orders, 1, profile("happy-path")))[like], "orderId": order_id}
    lines = [{"body": json.dumps(body), "message_id": message_id}]
    result = run(lines, orders=orders)
    return build_report(result), check(result, lines)


# -- lines the broker cannot carry ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ({"body": "\ud800 lone"}, "UTF-8"),
        ({"body": "x" * 300_000}, "frame size"),
        ({"body": "{}", "message_id": "m" * 129}, "128"),
        ({"body": "{}", "at_s": -1}, "at_s"),
        ({"body": "{}", "at_s": "soon"}, "at_s"),
    ],
)
def test_a_line_service_bus_cannot_carry_is_refused_with_its_line_number(tmp_path, line, said):
    """Before, a lone surrogate crashed the run (``UnicodeEncodeError`` in the broker's size check) and a body
    over 256 KB or a MessageId over 128 characters failed it after 50 sends (``RuntimeError``): no report."""
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"body": "{}"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=":2: ") as refused:
        read_raw(raw)
    assert said in str(refused.value)


def test_a_line_the_broker_cannot_carry_given_to_the_runner_directly_is_refused_before_the_run():
    with pytest.raises(ValueError, match="UTF-8"):
        run([{"body": "\ud800"}], orders=1)


# -- a new order named to another submitter's queue ----------------------------------------------------------------


def test_an_injected_order_of_its_own_told_on_a_submitters_queue_is_not_misrouted():
    """An injected submission of an order the workload does not have, naming one of the run's status queues: the
    app tells that queue, as the submission asked. Before, the report counted each of those statuses
    ``misrouted_statuses`` (it knew only the workload's orders)."""
    report, problems = new_order("injected-1", "injected-1")
    assert problems == []
    assert report["final_states"]["Processed"] == 4


def test_a_workload_orders_status_on_another_queue_is_still_misrouted_whatever_a_line_named():
    """The report's allowance is for orders the workload does not have: a duplicate of a workload order naming
    another queue (dead-lettered ``ConflictingOrderData``) does not make that queue a right one for it."""
    from localrun.report import misrouted_statuses

    valid = {"ord-00001": {"replyTo": "submitter-1-statuses"}}
    injected = {"ord-00001": {"submitter-2-statuses"}, "new-1": {"submitter-2-statuses"}}
    statuses = [
        {"orderId": "ord-00001", "_queue": "submitter-2-statuses", "status": "Received"},
        {"orderId": "new-1", "_queue": "submitter-2-statuses", "status": "Received"},
        {"orderId": "new-1", "_queue": "submitter-1-statuses", "status": "Received"},
    ]
    assert [(s["orderId"], s["_queue"]) for s in misrouted_statuses(statuses, valid, injected)] == [
        ("ord-00001", "submitter-2-statuses"),
        ("new-1", "submitter-1-statuses"),
    ]


# -- a MessageId of the workload's taken first ---------------------------------------------------------------------


def test_a_workload_order_whose_message_id_a_line_took_first_is_not_lost():
    """A line sent first under a workload order's MessageId (``ord-00001``, its order id): Service Bus's duplicate
    detection drops the real submission, which never reaches the app. Before, the report counted the order
    ``lost`` (or, when the line was dead-lettered, matched it by that foreign dead letter)."""
    report, problems = new_order("squatter-1", "ord-00001", like="ord-00002")
    assert problems == []
    assert report["preempted_messages"] == ["ord-00001"]


def test_a_workload_notification_whose_message_id_a_line_took_first_is_not_unmatched():
    prepaid = Profile.parse({"orders": {"prepaid_rate": 1.0}})
    workload = workload_of(2, 1, prepaid)
    body = {**submitted(workload)["ord-00002"], "orderId": "squatter-2"}
    lines = [{"body": json.dumps(body), "message_id": "pay-ord-00001"}]
    config = SimulationConfig(orders=2, seed=1, profile=prepaid, raw_lines=lines, settings=FAST)
    result = run_simulation(config)
    report = build_report(result)
    assert report["invariants"]["unmatched_notifications"] == 0
    assert report["preempted_messages"] == ["pay-ord-00001"]


# -- the families, a few lines a run -------------------------------------------------------------------------------


def _sample(family: str, seed: int, orders: int, name: str, k: int) -> list[dict[str, Any]]:
    workload = workload_of(orders, seed, profile(name))
    rng = random.Random(f"{family}:{seed}:{name}")
    drawn = list(FAMILIES[family](workload, rng))
    return drawn if len(drawn) <= k else rng.sample(drawn, k)


SHORT = [
    ("payments", "prepaid-notifications", 1),
    ("cancels", "happy-path", 1),
    ("duplicates", "happy-path", 2),
    ("retries", "all-faults", 1),
    ("shapes", "all-faults", 2),
    ("ids", "prepaid-notifications", 3),
]
RUNS = int(os.environ.get("REDTEAM_INJECT_RAW_RUNS", "0"))
LONG = [(f, p, s) for f in FAMILIES for p in ("happy-path", "all-faults") for s in range(1, RUNS + 1)]


@pytest.mark.parametrize(("family", "name", "seed"), LONG or SHORT)
def test_hostile_lines_of_each_family_are_settled_and_violate_nothing(family, name, seed):
    lines = _sample(family, seed, 6, name, k=4 if not RUNS else 100)
    assert check(run(lines, orders=6, seed=seed, name=name), lines) == [], lines


def test_the_families_are_broad():
    workload = workload_of(6, 1, profile("prepaid-notifications"))
    drawn = {family: list(build(workload, random.Random(1))) for family, build in FAMILIES.items()}
    assert all(len(lines) >= 4 for lines in drawn.values())
    assert sum(len(lines) for lines in drawn.values()) > 50


# -- a workload order's id taken first by a line with another status queue ---------------------------------------


@pytest.mark.parametrize("reply_to", ["another submitter's", "no-such-queue"])
def test_a_workload_order_whose_id_a_line_submitted_first_is_judged_as_the_lines(reply_to):
    """A line submits ``ord-00001`` first, with the workload's data but another status queue: the app accepts it
    (first come), and dead-letters the workload's own submission ``ConflictingOrderData`` with an alert, as
    designed. The order the app ran is the line's, told on the line's queue. Before, the report judged it as the
    workload's: ``misrouted_statuses`` 3 (its statuses on the other submitter's queue) or ``missing_statuses``
    1 (a queue that does not exist, alerted ``ReplyQueueUnavailable``, its own submitter told nothing)."""
    workload = workload_of(3, 1, profile("happy-path"))
    body = submitted(workload)["ord-00001"]
    others = [q for q in workload.submitters if q != body["replyTo"]]
    queue = others[0] if reply_to != "no-such-queue" else reply_to
    lines = [{"body": json.dumps({**body, "replyTo": queue}), "message_id": "squat"}]
    result = run(lines, orders=3)
    report = build_report(result)
    assert check(result, lines) == []
    assert [(d["message_id"], d["reason"]) for d in report["dead_letters"]] == [("ord-00001", "ConflictingOrderData")]
    assert report["alerts"]["ConflictingOrderData"] == 1


# -- a line under a MessageId that looks like a copy of a workload message's ----------------------------------------


def test_a_lines_dead_letter_under_a_copy_like_message_id_does_not_stand_for_a_lost_order(monkeypatch):
    """A line whose MessageId looks like the app's store-retry copy of ``ord-00001`` (``ord-00001:store-retry:1``),
    dead-lettered ``NotJson``: the report took that dead letter for the order's, so an order the app lost went
    uncounted. Only the app's own copies (their round property) stand for their original. The order is lost
    here by never being sent (the report's evidence is the same as for an order the app dropped)."""
    import localrun.simulation as simulation
    from localrun.workload import make_workload as drawn

    def without_first_order(*args: Any, **kwargs: Any) -> Any:
        workload = drawn(*args, **kwargs)
        workload.arrivals[:] = [a for a in workload.arrivals if a.order_id != "ord-00001" or a.kind != "order"]
        return workload

    monkeypatch.setattr(simulation, "make_workload", without_first_order)
    lines = [{"body": "not json", "message_id": "ord-00001:store-retry:1"}]
    report = build_report(run(lines, orders=2))
    assert report["invariants"]["lost"] == 1


# -- forged RetryDeferred with plausible sequence numbers ----------------------------------------------------------


def test_forged_retries_for_every_plausible_sequence_number_change_nothing():
    """Every notification comes before its order and is deferred; a ``RetryDeferred`` for every sequence number
    it can have, for each order, meanwhile: each is completed unread (no ``retryToken``) or dead-lettered
    ``UntrackedDeferral``, and every notification is still applied by its order."""
    prepaid = Profile.parse({"orders": {"prepaid_rate": 1.0, "payment_notification_first_rate": 1.0}})
    lines = list(forged_retries(workload_of(3, 1, prepaid), rounds=(1,), top=10))
    result = run_simulation(SimulationConfig(orders=3, seed=1, profile=prepaid, raw_lines=lines, settings=FAST))
    report = build_report(result)
    assert check(result, lines) == []
    assert report["final_states"]["Processed"] == 3
    assert report["deferred"]["deferred"] == 3
    assert {d["reason"] for d in report["dead_letters"]} == {"UntrackedDeferral"}


# -- conflicting submissions of one order, each alerted -------------------------------------------------------------


def test_each_conflicting_submission_of_an_order_is_alerted_even_within_duplicate_detections_window():
    """Two submissions of ``ord-00001`` with other data (another address, then another status queue), a minute
    apart: both dead-lettered ``ConflictingOrderData``. Before, both alerts had the id
    ``alert:ConflictingOrderData:ord-00001:ord-00001``, so duplicate detection kept the first and the second
    conflict (a status queue nobody was told of) reached no operator. Each is alerted under the refused message's
    sequence number as sent, as ``OrderRejected`` is (a redelivery or copy of one message still collapses)."""
    body = submitted(workload_of(3, 1, profile("happy-path")))["ord-00001"]
    other_queue = {**body, "replyTo": "submitter-3-statuses" if body["replyTo"] != "submitter-3-statuses" else "x"}
    lines = [
        {"body": json.dumps({**body, "shipTo": "1 Hostile Road"}), "message_id": "conflict-1", "at_s": 120},
        {"body": json.dumps(other_queue), "message_id": "conflict-2", "at_s": 180},
    ]
    result = run(lines, orders=3)
    report = build_report(result)
    assert check(result, lines) == []
    assert [d["reason"] for d in report["dead_letters"]] == ["ConflictingOrderData"] * 2
    assert report["alerts"].get("ConflictingOrderData") == 2


# -- an order alone in an outage --------------------------------------------------------------------------------------


def test_a_valid_order_sent_alone_into_an_outage_waits_it_out():
    """Met by the ``ids`` family on all-faults, seed 3 (``REDTEAM_INJECT_RAW_RUNS=3``): any valid order will do.
    The workload's 6 orders are sent in the first 30 s and done before payment's outage (60 to 150 s); this one
    comes at 120 s, its three attempts fail transiently inside the outage, and it ends ``Error``. At 100 s it
    passes (its first attempt's failures and backoff straddle the outage's end). Its failures never opened the
    circuit (one count throttled away: 7 in a row); it now waits while the service has had no success since
    (docs/supervisor.md, Dependency outages)."""
    workload = workload_of(6, 3, profile("all-faults"))
    body = {**submitted(workload)["ord-00001"], "orderId": "late-1"}
    lines = [{"body": json.dumps(body), "message_id": "late-1", "at_s": 120}]
    assert check(run(lines, orders=6, seed=3, name="all-faults"), lines) == []


# -- an injected order's own statuses are judged ------------------------------------------------------------------


def test_an_injected_order_that_never_hears_how_it_ended_is_counted(monkeypatch):
    """An order submitted only by a line, naming one of the run's status queues, is owed its statuses there as a
    workload order is. Its ``Completed`` swallowed here (the send answered sent, nothing on the queue): before, the
    report judged statuses of the workload's orders only and counted nothing."""
    import notifications.status as status

    real = status.publish_status

    def swallow_injected_completed(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("order_id") == "injected-1" and kwargs.get("status") == "Completed":
            return status.Delivery.SENT
        return real(*args, **kwargs)

    monkeypatch.setattr(status, "publish_status", swallow_injected_completed)
    report, _ = new_order("injected-1", "injected-1")
    assert report["final_states"]["Processed"] == 4
    assert report["invariants"]["missing_statuses"] == 1
    assert report["invariant_examples"]["missing_statuses"] == ["injected-1"]
