"""Keys a newer version wrote INSIDE a document's entries (a step, a compensation log entry, a history entry, the
payment, the last write, the review default, a deferred message, a refused notification) survive this version's
writes, against the Cosmos DB protocol server: during a rolling upgrade (Flex Consumption deployment, slot swap)
old and new code write the same records, so every transition the current code makes is run on a record whose
every entry carries a key of the next version, and each entry the transition changes or leaves alone still has
its key, unchanged, after it. An entry the transition makes anew (a step started again under a new request, the
record's ``lastWrite`` of a new write, the default of a new review) starts without: a newer field of the entry
before would be about another request (docs/design.md, "Versions")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters.cosmos.deferral_store import update_deferrals
from adapters.cosmos.state_store import update_fenced, update_once
from domain import compensation, deferral, transitions
from domain.deferral import DeferralReason, DeferredEntry, EntryStatus
from domain.payments import with_payment
from domain.records import PaymentReceived
from domain.states import ProcessState
from domain.write_order import in_write_order

pytestmark = pytest.mark.cosmos
GRACE = timedelta(seconds=60)
INVENTORY, PAYMENT = "reserve-inventory", "charge-payment"


def _entries(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every entry of a stored state record or deferral document, by a name that stays the entry's while it lives."""
    found: dict[str, dict[str, Any]] = {}
    for name, step in (doc.get("steps") or {}).items():
        found[f"step {name} {step['requestId']}"] = step
    for entry in doc.get("compensation") or []:
        found[f"compensation {entry['seq']}"] = entry
    for index, entry in enumerate(doc.get("history") or []):  # fewer than HISTORY_LIMIT here: none drops off
        found[f"history {index} {entry['event']}"] = entry
    for key in ("payment", "lastWrite", "reviewDefault"):
        if doc.get(key) is not None:
            found[f"{key} {sorted(doc[key].items())}"] = doc[key]
    for entry in doc.get("entries") or []:
        found[f"deferred {entry['sequenceNumber']}"] = entry
    for entry in doc.get("refusedNotifications") or []:
        found[f"refused {entry['sequenceNumber']}"] = entry
    return found


class NewerWriter:
    """A newer version writing the same documents: each entry gets its own field, naming the entry."""

    def __init__(self, app_context: Any, doc_id: str, partition: str) -> None:
        self._c = app_context.states._c
        self._id, self._partition = doc_id, partition
        self.marked: dict[str, Any] = {}

    def writes(self) -> None:
        item = self._c.read_item(self._id, partition_key=self._partition)
        for name, entry in _entries(item).items():
            entry.setdefault("futureNote", {"v": 9, "entry": name, "seen": [1, None]})
        self._c.replace_item(self._id, item)
        self.marked = {name: entry["futureNote"] for name, entry in _entries(item).items()}

    def kept(self, made_anew: tuple[str, ...] = ()) -> list[str]:
        """The marked entries still in the document that lost their key (or had it changed), but for those
        whose names start with one of ``made_anew``."""
        item = self._c.read_item(self._id, partition_key=self._partition)
        now = _entries(item)
        lost = [
            name
            for name, note in self.marked.items()
            if name in now and now[name].get("futureNote") != note and not name.startswith(made_anew)
        ]
        return lost


def _step(app_context: Any, writer: NewerWriter, change: Any, made_anew: tuple[str, ...] = ()) -> Any:
    """The newer version writes every entry, this version makes ``change``: nothing the newer one wrote is lost."""
    writer.writes()
    app_context.states.forget_recent()
    written = change()
    assert writer.kept(made_anew) == []
    return written


def test_every_transition_keeps_the_newer_keys_of_the_entries_it_does_not_make_anew(app_context, clock):
    states = app_context.states
    writer = NewerWriter(app_context, "o1", "o1")
    states.create(transitions.new_record("o1", None, clock.now()))
    now = clock.now

    def fenced(owner: str, change: Any, number: int | None = None) -> Any:
        return lambda: update_fenced(states, "o1", owner, lambda r: in_write_order(r, owner, number, change))

    def once(change: Any) -> Any:
        return lambda: update_once(states, states.get("o1"), change)

    def deadline() -> Any:
        return now() + GRACE

    _step(app_context, writer, once(lambda r: transitions.claim(r, now(), GRACE)))
    _step(app_context, writer, once(lambda r: with_payment(r, _payment(now()), now())))
    _step(
        app_context,
        writer,
        fenced("o1:1", lambda r: transitions.begin_step(r, "o1:1", INVENTORY, "inventory", "q1", deadline(), now()), 1),
    )
    result = {"reservationId": "r-1"}
    _step(
        app_context,
        writer,
        fenced("o1:1", lambda r: compensation.complete_step_logged(r, "o1:1", INVENTORY, result, deadline(), now()), 2),
        made_anew=("lastWrite",),
    )
    _step(
        app_context,
        writer,
        fenced("o1:1", lambda r: transitions.begin_step(r, "o1:1", PAYMENT, "payment", "q2", deadline(), now()), 3),
        made_anew=("lastWrite",),
    )
    clock.advance(GRACE * 2)
    # the supervisor retries the expired attempt, the starter claims the next, which starts the step again
    _step(app_context, writer, once(lambda r: transitions.supervisor_retry(r, "o1:1", now(), 5, timedelta(0))))
    _step(app_context, writer, once(lambda r: transitions.claim(r, now(), GRACE)))
    _step(
        app_context,
        writer,
        fenced(
            "o1:2", lambda r: transitions.begin_step(r, "o1:2", PAYMENT, "payment-backup", "q3", deadline(), now()), 1
        ),
    )
    _step(
        app_context,
        writer,
        fenced(
            "o1:2",
            lambda r: compensation.await_review(
                r, "o1:2", PAYMENT, "rev-1", deadline(), now(), error="refused", default_action="compensate"
            ),
            2,
        ),
        made_anew=("lastWrite",),
    )
    # the review's default: compensate (the attempt asks for it, fenced)
    _step(
        app_context,
        writer,
        fenced(
            "o1:2",
            lambda r: compensation.enter_compensation(r, "o1:2", "review default", now(), owner="o1:2"),
            3,
        ),
        made_anew=("lastWrite",),
    )
    claimed = _step(
        app_context, writer, once(lambda r: compensation.claim_compensation(r, now(), GRACE, 3, "supervisor"))
    )
    owner = claimed.locked_by
    assert owner is not None and [e.step for e in claimed.compensation] == [INVENTORY]
    _step(
        app_context,
        writer,
        fenced(owner, lambda r: compensation.begin_undo(r, owner, 1, "u1", deadline(), now()), 1),
    )
    _step(
        app_context,
        writer,
        fenced(owner, lambda r: compensation.fail_compensation(r, owner, 1, "no such reservation", now()), 2),
        made_anew=("lastWrite",),
    )
    # the operator: the entry undone by hand, so the order is Compensated by their word
    settled = _step(
        app_context,
        writer,
        once(lambda r: compensation.settle_by_hand(r, (1,), "ops@example.com", "released by hand", now())),
    )
    assert settled.compensation[0].undone_by == "ops@example.com"
    # every kind of entry was written by the newer version and kept through the last write
    kinds = {name.split(" ")[0] for name in writer.marked}
    assert kinds == {"step", "compensation", "history", "payment", "lastWrite", "reviewDefault"}


def test_an_operator_s_resubmit_and_a_failure_keep_the_newer_keys(app_context, clock):
    states = app_context.states
    writer = NewerWriter(app_context, "o2", "o2")
    now = clock.now
    states.create(transitions.claim(transitions.new_record("o2", None, now()), now(), GRACE))
    deadline = now() + GRACE
    _step(
        app_context,
        writer,
        lambda: update_fenced(
            states,
            "o2",
            "o2:1",
            lambda r: transitions.begin_step(r, "o2:1", INVENTORY, "inventory", "q1", deadline, now()),
        ),
    )
    _step(
        app_context,
        writer,
        lambda: update_fenced(states, "o2", "o2:1", lambda r: transitions.fail(r, "o2:1", INVENTORY, "refused", now())),
    )
    resubmitted = _step(
        app_context,
        writer,
        lambda: update_once(states, states.get("o2"), lambda r: transitions.resubmit(r, "ops", "try again", now())),
    )
    assert resubmitted.process_state is ProcessState.PENDING


def test_a_step_started_again_under_a_new_request_starts_without_the_newer_keys(app_context, clock):
    """The step's entry is made anew for the new request: a newer field of the one before (which agents it went
    to, when its reply came) would be wrong about it, so it reads "not known" to the newer version."""
    states = app_context.states
    writer = NewerWriter(app_context, "o3", "o3")
    now = clock.now
    states.create(transitions.claim(transitions.new_record("o3", None, now()), now(), GRACE))
    deadline = now() + GRACE
    begin = transitions.begin_step
    update_fenced(states, "o3", "o3:1", lambda r: begin(r, "o3:1", INVENTORY, "inventory", "q1", deadline, now()))
    writer.writes()
    states.forget_recent()
    update_fenced(states, "o3", "o3:1", lambda r: begin(r, "o3:1", INVENTORY, "inventory", "q2", deadline, now()))
    step = app_context.states._c.read_item("o3", partition_key="o3")["steps"][INVENTORY]
    assert step["requestId"] == "q2" and "futureNote" not in step
    assert writer.kept(made_anew=(f"step {INVENTORY} q1",)) == []


def test_every_deferral_transition_keeps_the_newer_keys_of_its_entries(app_context, clock):
    log = app_context.deferrals
    doc_id = deferral.document_id("o4")
    writer = NewerWriter(app_context, doc_id, "o4")
    now = clock.now

    def change(apply: Any) -> Any:
        return lambda: update_deferrals(log, "o4", apply, now())

    update_deferrals(log, "o4", lambda d: deferral.with_entry(d, _deferred(7, now()), now()), now())
    update_deferrals(log, "o4", lambda d: deferral.with_entry(d, _deferred(8, now()), now()), now())
    update_deferrals(log, "o4", lambda d: deferral.rejected(d, now(), 3), now())
    _step(app_context, writer, change(lambda d: deferral.refused_notification(d, 8, now(), "order rejected")))
    clock.advance(GRACE)
    _step(app_context, writer, change(lambda d: deferral.with_entry(d, _deferred(7, now(), rounds=1), now())))
    _step(app_context, writer, change(lambda d: deferral.orderless_alerted(d, 7, now())))
    _step(app_context, writer, change(lambda d: deferral.absent_checked(d, now())))
    _step(app_context, writer, change(lambda d: deferral.accepted(d, now())))
    done = _step(app_context, writer, change(lambda d: deferral.with_status(d, 7, EntryStatus.APPLIED, now())))
    assert done.entry(7).status is EntryStatus.APPLIED
    assert {name.split(" ")[0] for name in writer.marked} == {"deferred", "refused"}


def _payment(now: Any) -> PaymentReceived:
    return PaymentReceived(
        notification_id="n-1", amount_cents=100, currency="EUR", provider_reference="p-1", received_at=now
    )


def _deferred(sequence_number: int, now: Any, rounds: int = 0) -> DeferredEntry:
    return DeferredEntry(
        sequence_number=sequence_number,
        message_id=f"m-{sequence_number}",
        message_type="PaymentNotification",
        reason=DeferralReason.ORDER_NOT_SUBMITTED,
        deferred_at=now,
        recorded_by="submission",
        rounds=rounds,
        updated_at=now,
        notification_id=f"n-{sequence_number}",
    )
