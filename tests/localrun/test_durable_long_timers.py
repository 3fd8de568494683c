"""A timer longer than the storage provider's maximum, as the real extension has the SDK run it.

The extension sends every orchestration context ``upperSchemaVersionNew`` V3 and, on the Azure
Storage provider, ``maximumShortTimerDuration`` 6 days and ``longRunningTimerIntervalDuration`` 3 days
(``OrchestrationTriggerAttributeBindingProvider.OrchestrationContextToString``,
``AzureStorageDurabilityProvider.MaximumDelayTime`` / ``LongRunningTimerIntervalLength`` in
Azure/azure-functions-durable-extension). azure-functions-durable 1.7 then splits a longer timer
into timers of at most 3 days (``LongTimerTask``): in Azure a 7-day wait is two timers, two task ids
and two ``TimerFired`` events in the history, not one. The runner sends the same fields, so an
orchestrator with a long timer (a review timeout over 6 days) replays here the history it replays
in Azure."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.durable_functions import OrchestrationRuntimeStatus

from adapters.clock import ManualClock
from localrun.durable import history as ev
from localrun.durable.engine import DurableEngine
from localrun.durable.registry import registered_orchestrators
from tests.localrun.durable_samples import FUNCTIONS, LONG_WAIT, REPLY_EVENT
from tests.localrun.real_durable_client import RealDurableClient

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
NAME = "reply_or_long_deadline_orchestrator"


class Hub:
    def __init__(self, fields: ev.ContextFields) -> None:
        self.clock = ManualClock(T0)
        self.engine = DurableEngine(
            registered_orchestrators(FUNCTIONS), self._no_activities, self.clock, context_fields=fields
        )
        self.real = RealDurableClient(self.engine)

    @staticmethod
    def _no_activities(name: str, value: Any) -> Any:
        raise AssertionError(f"no activity expected, got {name}")

    def start(self) -> str:
        instance_id = str(self.real.run(self.real.client.start_new(NAME, "long:1", None)))
        self.engine.run_until_idle()
        return instance_id

    def run_timers_until(self, end: datetime) -> None:
        while (due := self.engine.next_due_time()) is not None and due <= end:
            self.clock.set(due)
            self.engine.run_until_idle()

    def timers_created(self, instance_id: str) -> list[str]:
        instance = self.engine.instance(instance_id)
        assert instance is not None
        return [e.fields["FireAt"] for e in instance.history if e.type is ev.EventType.TIMER_CREATED]

    def status(self, instance_id: str) -> Any:
        return self.real.run(self.real.client.get_status(instance_id))


@pytest.fixture
def hub() -> Iterator[Hub]:
    made = Hub(ev.AZURE_STORAGE_CONTEXT)
    yield made
    made.real.close()


def test_a_seven_day_timer_is_two_timers_of_at_most_three_days_then_the_rest(hub):
    instance_id = hub.start()

    hub.run_timers_until(T0 + LONG_WAIT)

    status = hub.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output == {"outcome": "timed_out", "at": (T0 + LONG_WAIT).isoformat()}
    # the first timer 3 days out (longRunningTimerIntervalDuration); at day 3, 4 days are left, under
    # maximumShortTimerDuration: the last timer fires at the deadline itself
    expected = [ev.timestamp_text(T0 + timedelta(days=3)), ev.timestamp_text(T0 + LONG_WAIT)]
    assert hub.timers_created(instance_id) == expected


def test_a_reply_between_the_split_timers_wins_but_the_instance_runs_until_the_last_timer_fires(hub):
    """``cancel()`` on the SDK's ``LongTimerTask`` marks only the long timer, not the 3-day timer it
    has pending (Azure/azure-functions-durable-python issue 573), and the extension ends an
    orchestration only when no timer is pending: the orchestrator returned on day 4, the instance is
    Running until day 7."""
    instance_id = hub.start()
    hub.run_timers_until(T0 + timedelta(days=3))  # the first 3-day timer fired; the last one is pending

    hub.clock.set(T0 + timedelta(days=4))
    hub.real.run(hub.real.client.raise_event(instance_id, REPLY_EVENT, {"ok": True}))
    hub.engine.run_until_idle()

    assert hub.status(instance_id).runtime_status is OrchestrationRuntimeStatus.Running
    hub.run_timers_until(T0 + LONG_WAIT)
    status = hub.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output == {"outcome": "replied", "at": (T0 + timedelta(days=4)).isoformat()}


def test_without_the_extensions_timer_fields_the_sdk_sets_one_timer(hub):
    """What the runner sent before (schema V2, no timer limits): one 7-day timer, a history the
    orchestrator never has in Azure."""
    old = Hub(ev.SCHEMA_V2_ONLY_CONTEXT)
    try:
        instance_id = old.start()
        old.run_timers_until(T0 + LONG_WAIT)
        assert old.timers_created(instance_id) == [ev.timestamp_text(T0 + LONG_WAIT)]
        assert old.status(instance_id).output == {"outcome": "timed_out", "at": (T0 + LONG_WAIT).isoformat()}
    finally:
        old.real.close()
