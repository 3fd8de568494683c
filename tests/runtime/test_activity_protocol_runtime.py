"""The typed activity protocol through the real Functions runtime, for every activity: each recorded
input (``tests/orchestrators/test_activity_protocol.py``), serialised with ``to_json``, goes to the
activity trigger as the Durable extension sends it (an ``InvocationRequest`` whose ``TypedData`` is
the JSON), through the runtime's activity-trigger input converter into the trigger function, which
parses it; the plain code behind the trigger (replaced here by a stub that records what it got)
answers a typed result, which the trigger serialises and the runtime's output converter returns.
Both ends must come back equal: what the trigger parsed is the input that was sent, and what the
orchestrator parses from the returned JSON is the result that was answered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from activities import blueprint, compensation_steps, scheduler_steps
from localrun.worker import wire
from localrun.worker.process import FunctionsWorker
from tests.orchestrators.test_activity_protocol import RECORDED


def _invoke_activity(name: str, value: Any) -> Any:
    worker = FunctionsWorker.get()
    function = worker.functions[name]
    binding = next(b for b in function.bindings if b["type"] == "activityTrigger")
    data = wire.activity_input(worker.protos, json.dumps(value))
    text = wire.return_text(worker.invoke(function, {binding["name"]: data}))
    return None if text is None else json.loads(text)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_every_activity_input_and_result_crosses_the_runtime_converters_unchanged(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    input_type, inputs, parse, results = RECORDED[name]
    module = scheduler_steps if hasattr(scheduler_steps, name) else compensation_steps
    context = object()
    monkeypatch.setattr(blueprint, "get_context", lambda: context)
    answers = [parse(r) for r in results] if parse is not None else [None]
    for recorded in inputs:
        sent = input_type.from_json(recorded)
        for answer in answers:
            received: list[Any] = []

            def stub(ctx: Any, data: Any, answer: Any = answer, received: list[Any] = received) -> Any:
                assert ctx is context
                received.append(data)
                return answer

            monkeypatch.setattr(module, name, stub)
            returned = _invoke_activity(name, sent.to_json())
            assert received == [sent]
            assert type(received[0]) is input_type
            if parse is None:
                assert returned is None
            else:
                assert parse(returned) == answer
                assert returned == answer.to_json()
