"""The report's outages section from the app's events and the audited transitions."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from adapters.clock import ManualClock
from domain.states import ProcessState
from domain.timefmt import to_text
from localrun.audit import RemoteFailure, Transition
from localrun.outages import OWED_SLACK, CircuitLog, CircuitMove, operator_actions, outage_summary, paged_outages

T0 = datetime.fromisoformat("2026-03-01T12:00:00+00:00")


def t(seconds: float, order: str, event: str) -> Transition:
    return Transition(T0 + timedelta(seconds=seconds), order, None, ProcessState.PENDING, event, "supervisor", None)


def test_opened_closed_orders_waited_and_the_longest_wait():
    events: list[dict[str, Any]] = [
        {"event": "DependencyOutage", "dependency": "shipping"},
        {"event": "SupervisorOutageWait", "dependency": "shipping", "orderId": "a"},
        {"event": "SupervisorOutageWait", "dependency": "shipping", "orderId": "a"},
        {"event": "SupervisorOutageWait", "dependency": "shipping", "orderId": "b"},
        {"event": "DependencyRecovered", "dependency": "shipping", "outageSeconds": 600.0},
        {"event": "DependencyOutage", "dependency": "payment"},
        {"event": "SupervisorRecovered", "orderId": "c"},  # no dependency: ignored
    ]
    transitions = [
        t(0, "a", "StepStarted"),
        t(60, "a", "OutageWait"),
        t(90, "a", "Claimed"),
        t(91, "a", "StepStarted"),
        t(92, "a", "StepTransientFailure"),
        t(120, "a", "OutageWait"),
        t(700, "a", "StepSucceeded"),  # waited 640 s
        t(100, "b", "OutageWait"),
        t(200, "b", "StepSucceeded"),  # 100 s
    ]
    summary = outage_summary(events, transitions)
    quiet = {
        "alerts_opened": 0,
        "alerts_closed": 0,
        "paged_outages": 0,
        "paged_recoveries": 0,
        "terminal_after_end_p99_s": 0.0,
    }
    assert summary == {
        "payment": {"opened": 1, "closed": 0, "longest_outage_s": 0.0, "orders_waited": 0, "max_wait_s": 0.0} | quiet,
        "shipping": {"opened": 1, "closed": 1, "longest_outage_s": 600.0, "orders_waited": 2, "max_wait_s": 640.0}
        | quiet,
    }


def test_alerts_per_dependency_and_the_p99_time_to_terminal_after_the_outage_ended():
    events: list[dict[str, Any]] = [
        {"event": "DependencyOutage", "dependency": "shipping"},
        {"event": "DependencyRecovered", "dependency": "shipping", "outageSeconds": 300.0},
        *({"event": "SupervisorOutageWait", "dependency": "shipping", "orderId": o} for o in ("a", "b", "c")),
    ]
    alerts = [
        {"kind": "DependencyOutage", "details": {"dependency": "shipping"}},
        {"kind": "DependencyRecovered", "details": {"dependency": "shipping"}},
        {"kind": "RetriesExhausted", "orderId": "z", "details": {}},  # per order: not an outage's alert
    ]
    windows = {"shipping": [(T0, T0 + timedelta(seconds=300))]}
    settled = {"a": T0 + timedelta(seconds=340), "b": T0 + timedelta(seconds=400), "c": T0 + timedelta(seconds=100)}
    row = outage_summary(events, [], alerts, windows, settled)["shipping"]
    assert (row["alerts_opened"], row["alerts_closed"]) == (1, 1)
    assert row["terminal_after_end_p99_s"] == 100.0  # b: 100 s after the end; c settled inside it


def failure(seconds: float, order: str, service: str = "shipping", transient: bool = True) -> RemoteFailure:
    return RemoteFailure(T0 + timedelta(seconds=seconds), order, service, transient)


def test_operator_actions_count_only_the_orders_an_outage_alone_failed():
    windows = {"shipping": [(T0, T0 + timedelta(seconds=600))]}
    finals = {
        "waited": {"processState": "Error", "lastError": "retries exhausted after 3 failed attempts"},
        "bound": {"processState": "Error", "lastError": "... beyond MAX_OUTAGE_WAIT_MINUTES=10: escalated"},
        "refused": {"processState": "CompensationFailed", "lastError": "refund refused"},
        "healthy": {"processState": "Error", "lastError": "retries exhausted"},
        "never_caught": {"processState": "Error", "lastError": "retries exhausted"},
        "fine": {"processState": "Processed"},
    }
    transitions = [t(100, "waited", "OutageWait"), t(100, "bound", "OutageWait"), t(100, "fine", "OutageWait")]
    failures = [
        failure(50, "waited"),
        failure(60, "refused"),
        failure(700, "refused", "payment", transient=False),  # a genuine refusal
        failure(100, "healthy"),
        failure(900, "healthy"),  # failed on shipping after its outage ended: the order's own failure
    ]
    actions = operator_actions(finals, transitions, failures, windows, waiting_enabled=True)
    assert actions.failed == ["bound", "healthy", "never_caught", "refused", "waited"]
    assert actions.outage_only == ["bound", "waited"]
    assert actions.by_the_bound == ["bound"]
    assert actions.unexpected == ["waited"]  # the invariant counts it
    # waiting turned off (MAX_OUTAGE_WAIT_MINUTES=0): escalating in an outage is the configured policy
    assert operator_actions(finals, transitions, failures, windows, waiting_enabled=False).unexpected == []


def test_a_claim_released_untried_does_not_end_the_wait():
    """A claim whose start its run never tried, released at once (``StartNotTried``, a round's
    ``CompensationStartNotTried``: orchestrators/starter.py), keeps the app's wait (``outageWaitSince``): neither a
    move of the attempt nor a count. The wait it ended in the report was shorter than the app's, and an order the app
    escalated at MAX_OUTAGE_WAIT_MINUTES could read as failed by an outage before its bound."""
    events: list[dict[str, Any]] = [
        {"event": "DependencyOutage", "dependency": "shipping"},
        *({"event": "SupervisorOutageWait", "dependency": "shipping", "orderId": o} for o in ("a", "b")),
    ]
    attempt = [
        t(60, "a", "OutageWait"),
        t(90, "a", "Claimed"),
        t(95, "a", "StartNotTried"),  # the starter's time for starts spent: released, still waiting
        t(110, "a", "Claimed"),
        t(111, "a", "StepStarted"),
        t(700, "a", "StepSucceeded"),  # waited 640 s
    ]
    rounds = [
        t(100, "b", "OutageWait"),
        t(130, "b", "CompensationClaimed"),
        t(131, "b", "CompensationStartNotTried"),  # the supervisor's run's, the same
        t(160, "b", "CompensationClaimed"),
        t(400, "b", "Compensated"),  # waited 300 s
    ]
    for transitions, waited in ((attempt, 640.0), (rounds, 300.0)):
        row = outage_summary(events, transitions)["shipping"]
        assert (row["orders_waited"], row["max_wait_s"]) == (2, waited)


def moves(dependency: str, *spans: tuple[float, float]) -> list[CircuitMove]:
    """The circuit of ``dependency`` open over each (from, to) span, seconds from T0."""
    return [
        CircuitMove(T0 + timedelta(seconds=s), dependency, opened)
        for start, end in spans
        for s, opened in ((start, True), (end, False))
    ]


SETTLE = timedelta(seconds=300)


def test_the_alerts_owed_merge_reopenings_sooner_than_the_settling_period_into_the_outage_before():
    """The report's expected pages follow OUTAGE_SETTLE_SECONDS: a circuit flapping (closed 60 s between
    openings) owes one outage and one recovery; a reopening 360 s after it closed is a new outage."""
    flaps = moves("shipping", (0, 40), (100, 140), (200, 240), (600, 640))
    end = T0 + timedelta(seconds=1000)
    assert paged_outages(flaps, SETTLE, end) == {"shipping": (2, 2)}
    assert paged_outages(flaps, SETTLE, T0 + timedelta(seconds=900)) == {"shipping": (2, 1)}  # closed < 300 s
    assert paged_outages(flaps, timedelta(0), end) == {"shipping": (4, 4)}  # no settling: a pair per opening
    still_open = [*flaps, CircuitMove(T0 + timedelta(seconds=700), "shipping", True)]
    assert paged_outages(still_open, SETTLE, end) == {"shipping": (2, 1)}
    row = outage_summary([], [], [], {}, {}, paged_outages(flaps, SETTLE, end))["shipping"]
    assert (row["paged_outages"], row["paged_recoveries"]) == (2, 2)


def test_the_run_waits_for_a_recovery_owed_until_the_settling_period_and_a_few_runs_past_it():
    clock = ManualClock(T0)
    circuits = CircuitLog(clock)
    log = logging.getLogger("tests.circuit.outage_summary")
    log.addHandler(circuits)
    log.setLevel(logging.INFO)
    try:
        log.info("opened", extra={"event": "DependencyOutage", "dependency": "payment"})
        assert not circuits.owed(clock.now(), SETTLE)  # open: no recovery to wait for
        paged = {"event": "OutageAlertSent", "dependency": "payment", "outageStartedAt": T0.isoformat()}
        log.info("paged", extra=paged | {"alertKind": "DependencyOutage"})
        clock.advance(timedelta(seconds=40))
        log.info("closed", extra={"event": "DependencyRecovered", "dependency": "payment"})
        assert circuits.owed(clock.now(), SETTLE)
        assert circuits.owed(clock.now() + SETTLE, SETTLE)  # a few supervisor runs past it still
        assert not circuits.owed(clock.now() + SETTLE + OWED_SLACK, SETTLE)  # not coming: the report shows it
        log.info("recovered", extra=paged | {"alertKind": "DependencyRecovered"})
        assert not circuits.owed(clock.now(), SETTLE)
    finally:
        log.removeHandler(circuits)
    assert [(m.at, m.opened) for m in circuits.moves] == [(T0, True), (T0 + timedelta(seconds=40), False)]


def test_an_outage_paged_by_the_release_before_is_recovered_by_its_moment_whatever_the_form():
    """The run owes a recovery by the outage's ``outageStartedAt``, read as a moment: the release before session 63
    logged it ``+00:00`` (``isoformat``), this one in ``timefmt``'s form. Compared as text, an outage paged before an
    upgrade and recovered after it stayed owed."""
    clock = ManualClock(T0)
    circuits = CircuitLog(clock)
    sent = {"event": "OutageAlertSent", "dependency": "payment"}
    for name, extra in [
        ("opened", {"event": "DependencyOutage", "dependency": "payment"}),
        ("paged", sent | {"alertKind": "DependencyOutage", "outageStartedAt": T0.isoformat()}),
        ("closed", {"event": "DependencyRecovered", "dependency": "payment"}),
    ]:
        circuits.handle(logging.makeLogRecord({"msg": name, **extra}))
    assert circuits.owed(clock.now(), SETTLE)
    recovered = sent | {"alertKind": "DependencyRecovered", "outageStartedAt": to_text(T0)}
    circuits.handle(logging.makeLogRecord({"msg": "recovered", **recovered}))
    assert not circuits.owed(clock.now(), SETTLE)


def test_the_alerts_owed_follow_the_clocks_the_app_judges_the_settling_period_by():
    """Under clock skew (profile ``host.clock_skew_s``) the app judges the settling period from the times the agents
    wrote (their clocks) against the supervisor's clock: a supervisor 40 s ahead of true time and agents 30 s behind
    send the recovery 70 s sooner in true time, and a reopening after it is a new outage. The report counted both in
    true time: a run ended after the recovery was sent showed it as not owed (``paged_recoveries`` 0, the alert 1),
    and a run whose circuit reopened after it owed one outage where the app, rightly, paged two."""
    agents, supervisor = timedelta(seconds=-30), timedelta(seconds=40)
    opened_closed = [
        CircuitMove(T0, "payment", True, agents),
        CircuitMove(T0 + timedelta(seconds=40), "payment", False, agents),
    ]
    sent = T0 + timedelta(seconds=40 + 300 - 70)  # the supervisor's clock past the settling period, by the agents'
    assert paged_outages(opened_closed, SETTLE, sent, supervisor) == {"payment": (1, 1)}
    assert paged_outages(opened_closed, SETTLE, sent - timedelta(seconds=1), supervisor) == {"payment": (1, 0)}
    reopened = [*opened_closed, CircuitMove(sent + timedelta(seconds=10), "payment", True, agents)]
    assert paged_outages(reopened, SETTLE, sent + timedelta(seconds=20), supervisor) == {"payment": (2, 1)}
    sooner = [*opened_closed, CircuitMove(sent - timedelta(seconds=10), "payment", True, agents)]
    assert paged_outages(sooner, SETTLE, sent + timedelta(seconds=20), supervisor) == {"payment": (1, 0)}
    # the hosts agreeing, as before: true time
    assert paged_outages(moves("payment", (0, 40)), SETTLE, sent, timedelta(0)) == {"payment": (1, 0)}

    clock = ManualClock(T0)
    circuits = CircuitLog(clock, skew=lambda: agents)
    log = logging.getLogger("tests.circuit.outage_summary.skew")
    log.addHandler(circuits)
    log.setLevel(logging.INFO)
    try:
        log.info("opened", extra={"event": "DependencyOutage", "dependency": "payment"})
        paged = {"event": "OutageAlertSent", "dependency": "payment", "outageStartedAt": T0.isoformat()}
        log.info("paged", extra=paged | {"alertKind": "DependencyOutage"})
        clock.advance(timedelta(seconds=40))
        log.info("closed", extra={"event": "DependencyRecovered", "dependency": "payment"})
    finally:
        log.removeHandler(circuits)
    assert circuits.moves == opened_closed  # each with the skew of the host that logged it
    last = sent + OWED_SLACK
    assert circuits.owed(last - timedelta(seconds=1), SETTLE, supervisor)
    assert not circuits.owed(last, SETTLE, supervisor)  # by the supervisor's clock, as the app's runs judge it
