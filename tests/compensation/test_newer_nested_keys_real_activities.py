"""The keys a newer version wrote inside a state record's entries survive the real activities of a forward attempt
and a compensation round (``begin_step``, the step's completion and its log entry, ``request_compensation``, the
supervisor's claim of a round, ``load_compensation``, ``begin_undo``, ``record_undo``, ``finish_compensation``), the
newer version writing every entry between them as a version running beside this one would (a rolling upgrade). The
domain's transitions over the store: ``tests/adapters/test_cosmos_newer_nested_fields.py``."""

from __future__ import annotations

from typing import Any

import pytest

from activities import compensation_steps
from domain.states import ProcessState
from tests.activity_calls import run
from tests.adapters.test_cosmos_newer_nested_fields import NewerWriter
from tests.compensation.support import (
    begin_charge,
    claim_round,
    compensation_round,
    forward_step,
    stored_record,
    submitted_and_claimed,
)

pytestmark = pytest.mark.cosmos
# an entry the activity makes anew: the record's last write (a new write's), never about the entry before
MADE_ANEW = ("lastWrite",)


def _kept_through(writer: NewerWriter, act: Any) -> None:
    writer.writes()
    act()
    assert writer.kept(MADE_ANEW) == []


def test_a_forward_attempt_and_its_compensation_keep_the_newer_keys_of_every_entry(ctx, ledger) -> None:
    submitted_and_claimed(ctx)
    writer = NewerWriter(ctx, "o1", "o1")
    results: dict[str, Any] = {}
    _kept_through(writer, lambda: forward_step(ctx, "o1:1", 1, "reserve-inventory", "inventory", results))
    _kept_through(writer, lambda: begin_charge(ctx, "o1:1", results=results))
    fenced = {"orderId": "o1", "instanceId": "o1:1", "step": "charge-payment", "attempt": 1}
    _kept_through(writer, lambda: run(compensation_steps.request_compensation, ctx, {**fenced, "error": "declined"}))
    _kept_through(writer, lambda: claim_round(ctx))
    round_owner = stored_record(ctx).locked_by
    assert round_owner is not None
    _kept_through(writer, lambda: compensation_round(ctx, round_owner, stored_record(ctx).attempt))
    done = stored_record(ctx)
    assert done.process_state is ProcessState.COMPENSATED and done.compensation[0].outcome == "Undone"
    assert {name.split(" ")[0] for name in writer.marked} >= {"step", "compensation", "history"}
