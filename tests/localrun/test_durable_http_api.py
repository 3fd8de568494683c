"""The runner's Durable extension HTTP API, driven by the SDK's own ``DurableOrchestrationClient``
over real HTTP on loopback, against a real ``DurableEngine``. Each case pins what the extension
answers (``HttpApiHandler.cs``; https://learn.microsoft.com/azure/azure-functions/durable/durable-functions-http-api):
through the client (the value or exception the app sees) and, where the client would accept several
answers, on the wire (status, headers, body).

All client calls run on one event loop for the whole module, as in the Functions worker: the SDK
keeps one aiohttp session per process, bound to the loop that created it
(``test_a_second_event_loop_cannot_use_the_client`` shows what a loop per call does)."""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import sys
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import azure.durable_functions as df
import pytest
from azure.durable_functions import OrchestrationRuntimeStatus
from azure.durable_functions.models.utils import http_utils

from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from localrun.durable.http_api import DurableExtensionApi
from localrun.durable.registry import registered_orchestrators
from tests.localrun.durable_samples import FUNCTIONS, REPLY_EVENT

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
SAMPLE = "reply_or_deadline_orchestrator"
FAILING = "failing_activity_orchestrator"
ORDER = {"orderId": "order-1"}
REPO = Path(__file__).resolve().parents[2]


def activities(name: str, value: Any) -> Any:
    if name == "prepare":
        return "prepared"
    if name == "finish":
        return {"done": value["reply"]}
    raise RuntimeError(f"{name} boom")


@dataclass
class Hub:
    engine: DurableEngine
    api: DurableExtensionApi
    client: Any  # azure.durable_functions.DurableOrchestrationClient
    loop: asyncio.AbstractEventLoop

    def run(self, call: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(call)

    def start(self, instance_id: str | None = "order-1:1", name: str = SAMPLE, data: Any = ORDER) -> str:
        return str(self.run(self.client.start_new(name, instance_id, data)))

    def status(self, instance_id: str, **flags: bool) -> Any:
        return self.run(self.client.get_status(instance_id, **flags))

    def raw(
        self, method: str, url: str, body: bytes | None = None, content_type: str = "application/json"
    ) -> tuple[int, dict[str, str], bytes]:
        """One request as any HTTP client would send it; ``url`` absolute or relative to rpcBaseUrl."""
        parts = urlsplit(url if "://" in url else self.api.rpc_base_url + url)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = {"Content-Type": content_type} if body is not None else {}
        try:
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def complete(self, instance_id: str = "order-1:1") -> None:
        self.engine.run_until_idle()
        self.run(self.client.raise_event(instance_id, REPLY_EVENT, {"outcome": "ok"}))
        self.engine.run_until_idle()
        assert self.engine_status(instance_id) is OrchestrationRuntimeStatus.Completed

    def engine_status(self, instance_id: str) -> OrchestrationRuntimeStatus:
        instance = self.engine.instance(instance_id)
        assert instance is not None
        return instance.status


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    # A session left by another module belongs to that module's loop: start this module clean.
    http_utils._client_session = None
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(http_utils._close_session())
    loop.close()


@pytest.fixture
def hub(loop: asyncio.AbstractEventLoop) -> Iterator[Hub]:
    engine = DurableEngine(registered_orchestrators(FUNCTIONS), activities, ManualClock(T0))
    api = DurableExtensionApi(engine)
    api.start()
    client = df.DurableOrchestrationClient(api.client_binding_json())
    yield Hub(engine, api, client, loop)
    # The pooled connection goes with the server; a later server may get the same port back.
    loop.run_until_complete(http_utils._close_session())
    api.close()


# --- the binding ----------------------------------------------------------------------------------


def test_the_client_binding_is_the_extensions_shape_and_points_the_sdk_at_the_server(hub):
    binding = json.loads(hub.api.client_binding_json())
    port = urlsplit(hub.api.rpc_base_url).port

    assert binding["taskHubName"] == "OrdersTaskHub"
    assert binding["rpcBaseUrl"] == f"http://127.0.0.1:{port}/durabletask/"
    assert binding["baseUrl"] == f"http://127.0.0.1:{port}/runtime/webhooks/durabletask"
    assert hub.api.base_url == binding["baseUrl"] + "/"
    assert set(binding) == {
        "taskHubName",
        "connectionName",
        "creationUrls",
        "managementUrls",
        "baseUrl",
        "requiredQueryStringParameters",
        "rpcBaseUrl",
        "httpBaseUrl",
        "maxGrpcMessageSizeInBytes",
    }
    assert binding["managementUrls"]["statusQueryGetUri"] == (
        f"{binding['baseUrl']}/instances/INSTANCEID?taskHub=OrdersTaskHub&connection=Storage"
    )
    # The SDK puts the instance id, as it is, in place of the binding's placeholder.
    links = hub.client.create_http_management_payload("order-7:2")
    assert links["terminatePostUri"] == (
        f"{binding['baseUrl']}/instances/order-7:2/terminate?reason={{text}}&taskHub=OrdersTaskHub&connection=Storage"
    )


def test_every_client_call_is_an_http_request_to_the_server(hub):
    hub.start()
    hub.status("order-1:1")
    hub.run(hub.client.raise_event("order-1:1", REPLY_EVENT, 1))
    hub.run(hub.client.terminate("order-1:1", "stop"))

    assert hub.api.requests == 4


# --- start ------------------------------------------------------------------------------------------


def test_start_answers_202_with_the_check_status_links_and_the_orchestrator_gets_the_input(hub):
    assert hub.start(data={"orderId": "order-1", "items": [1, 2]}) == "order-1:1"
    hub.engine.run_next()

    instance = hub.engine.instance("order-1:1")
    assert instance is not None
    assert instance.history[1].fields["Input"] == '{"orderId": "order-1", "items": [1, 2]}'
    assert instance.status is OrchestrationRuntimeStatus.Running

    status, headers, body = hub.raw("POST", "orchestrators/reply_or_deadline_orchestrator/order-2:1", b'"{}"')
    links = json.loads(body)
    assert status == 202
    assert headers["Location"] == links["statusQueryGetUri"]
    assert headers["Retry-After"] == "10"
    assert links["id"] == "order-2:1"
    assert links["statusQueryGetUri"].startswith(hub.api.base_url + "instances/order-2%3A1?taskHub=OrdersTaskHub")
    assert "rewindPostUri" not in links


def test_start_without_an_id_or_input_generates_an_id(hub):
    instance_id = hub.start(instance_id=None, data=None)

    assert len(instance_id) == 32
    assert int(instance_id, 16) >= 0
    status = hub.status(instance_id)
    assert status.runtime_status is OrchestrationRuntimeStatus.Pending
    assert status.input_ is None


def test_start_on_a_pending_or_running_id_fails_with_the_extensions_409(hub):
    hub.start()
    with pytest.raises(Exception) as pending:
        hub.start()
    hub.engine.run_next()
    with pytest.raises(Exception) as running:
        hub.start()

    # The SDK raises the response body itself: the extension's HttpError.
    assert pending.value.args == ({"Message": "An Orchestration instance with the status Pending already exists."},)
    assert running.value.args == ({"Message": "An Orchestration instance with the status Running already exists."},)
    status, _, _ = hub.raw("POST", "orchestrators/reply_or_deadline_orchestrator/order-1:1", b'"{}"')
    assert status == 409


def test_start_on_a_finished_id_overwrites_it_with_a_new_execution(hub):
    hub.start()
    hub.complete()
    first = hub.engine.instance("order-1:1")

    assert hub.start(data={"orderId": "order-1", "again": True}) == "order-1:1"
    hub.engine.settle_requests()  # numbered once the runner drives the engine again

    second = hub.engine.instance("order-1:1")
    assert second is not None and first is not None
    assert second.execution > first.execution
    assert second.history == []
    status = hub.status("order-1:1")
    assert status.runtime_status is OrchestrationRuntimeStatus.Pending
    assert json.loads(status.input_) == {"orderId": "order-1", "again": True}


def test_start_of_an_unknown_orchestrator_raises_the_extensions_message(hub):
    with pytest.raises(Exception, match=r"^The function 'nope' doesn't exist"):
        hub.start(name="nope")


BAD_CHARACTERS = (
    "instanceId (Parameter 'Orchestration instance ids must not contain /, \\, #, ?, or control characters.')"
)


@pytest.mark.parametrize(
    ("instance_id", "message"),
    [
        ("@order-1", "instanceId (Parameter 'Orchestration instance ids must not start with @.')"),
        ("order\\1", BAD_CHARACTERS),
        ("x" * 257, "Instance ID lengths must not exceed 256 characters."),
    ],
)
def test_start_with_an_id_the_extension_refuses_raises_its_message(hub, instance_id, message):
    """``DurableClient.StartNewAsync`` refuses the id (ArgumentException -> 400); the SDK raises its
    ``ExceptionMessage``. Nothing is started."""
    with pytest.raises(Exception) as refused:
        hub.start(instance_id=instance_id)
    assert refused.value.args == (message,)
    assert hub.engine.instances() == []


@pytest.mark.parametrize("escaped", ["order%231", "order%3F1", "order%011"])
def test_a_refused_character_that_comes_escaped_in_the_path_is_refused_too(hub, escaped):
    """``#`` and ``?`` can only reach the extension escaped (raw, they end the path); decoded, they
    are refused like a control character."""
    status, _, body = hub.raw("POST", f"orchestrators/reply_or_deadline_orchestrator/{escaped}", b'"{}"')
    assert status == 400
    assert json.loads(body)["ExceptionMessage"] == BAD_CHARACTERS
    assert hub.engine.instances() == []


def test_the_longest_id_is_accepted(hub):
    assert hub.start(instance_id="x" * 256) == "x" * 256


# --- raise event ---------------------------------------------------------------------------------


def test_raise_event_to_a_running_instance_is_accepted_and_delivered(hub):
    hub.start()
    hub.engine.run_until_idle()

    assert hub.run(hub.client.raise_event("order-1:1", REPLY_EVENT, {"outcome": "ok"})) is None
    hub.engine.run_until_idle()

    status = hub.status("order-1:1")
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output == {"outcome": "replied", "finished": {"done": {"outcome": "ok"}}}


def test_raise_event_to_a_pending_instance_is_accepted_and_kept_for_it(hub):
    hub.start()
    status, headers, body = hub.raw("POST", "instances/order-1:1/raiseEvent/Reply", b'"{\\"outcome\\": \\"early\\"}"')

    assert (status, body) == (202, b"")
    assert "Content-Type" not in headers
    hub.engine.run_until_idle()
    assert hub.status("order-1:1").output["finished"] == {"done": {"outcome": "early"}}


def test_raise_event_to_an_unknown_instance_is_404(hub):
    with pytest.raises(Exception, match=r"^No instance with ID nobody found\.$"):
        hub.run(hub.client.raise_event("nobody", REPLY_EVENT, {"outcome": "ok"}))

    assert hub.raw("POST", "instances/nobody/raiseEvent/Reply", b"1")[::2] == (404, b"")


@pytest.mark.parametrize("ending", ["completed", "terminated", "failed"])
def test_raise_event_to_a_finished_instance_is_410(hub, ending):
    if ending == "failed":
        hub.start(name=FAILING, data=None)
        hub.engine.run_until_idle()
        assert hub.engine_status("order-1:1") is OrchestrationRuntimeStatus.Failed
    else:
        hub.start()
        if ending == "completed":
            hub.complete()
        else:
            hub.run(hub.client.terminate("order-1:1", "stop"))
            hub.engine.run_until_idle()

    with pytest.raises(Exception, match=r"^Instance with ID order-1:1 is gone: either completed or failed$"):
        hub.run(hub.client.raise_event("order-1:1", REPLY_EVENT, {"outcome": "late"}))
    assert hub.raw("POST", "instances/order-1:1/raiseEvent/Reply", b"1")[::2] == (410, b"")


def test_raise_event_checks_the_instance_before_the_content_type(hub):
    hub.start()

    status, _, body = hub.raw("POST", "instances/order-1:1/raiseEvent/Reply", b"1", content_type="text/plain")

    assert status == 400
    assert json.loads(body) == {"Message": "Only application/json request content is supported"}
    assert hub.raw("POST", "instances/nobody/raiseEvent/Reply", b"1", content_type="text/plain")[0] == 404
    instance = hub.engine.instance("order-1:1")
    assert instance is not None and instance.inbox == []


# --- status -----------------------------------------------------------------------------------------


def test_status_of_an_unknown_instance_is_404_and_a_falsy_status(hub):
    status = hub.status("nobody")

    assert not status
    assert status.runtime_status is None
    assert hub.raw("GET", "instances/nobody")[::2] == (404, b"")


def test_status_of_a_running_instance_is_202_with_location_and_custom_status(hub):
    hub.start()
    hub.engine.run_until_idle()

    status = hub.status("order-1:1")
    assert status.runtime_status is OrchestrationRuntimeStatus.Running
    assert status.name == SAMPLE
    assert status.instance_id == "order-1:1"
    assert status.custom_status == {"waiting_since": T0.isoformat()}
    assert status.created_time == T0  # the engine's clock, not the wall clock
    # Without show_input the SDK sends no flag, and the extension's default is to show the input:
    # the JSON text the client posted, not the decoded object.
    assert status.input_ == '{"orderId": "order-1"}'
    assert status.output is None

    code, headers, body = hub.raw("GET", "instances/order-1:1?showInput=false")
    assert code == 202
    assert headers["Location"] == hub.api.rpc_base_url + "instances/order-1:1?showInput=false"
    assert headers["Retry-After"] == "5"
    payload = json.loads(body)
    assert payload["input"] is None
    assert payload["createdTime"] == "2026-03-01T08:00:00Z"
    assert "historyEvents" not in payload


def test_status_of_a_completed_instance_is_200_with_its_output(hub):
    hub.start()
    hub.complete()

    status = hub.status("order-1:1", show_input=True)
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output == {"outcome": "replied", "finished": {"done": {"outcome": "ok"}}}
    code, headers, _ = hub.raw("GET", "instances/order-1:1")
    assert code == 200
    assert "Location" not in headers


def test_status_of_a_failed_instance_is_200_unless_asked_for_500(hub):
    hub.start(name=FAILING, data=None)
    hub.engine.run_until_idle()

    assert hub.status("order-1:1").runtime_status is OrchestrationRuntimeStatus.Failed
    assert hub.raw("GET", "instances/order-1:1")[0] == 200
    assert hub.raw("GET", "instances/order-1:1?returnInternalServerErrorOnFailure=true")[0] == 500


def test_status_with_history_shows_the_extensions_history_events(hub):
    hub.start()
    hub.complete()

    plain = hub.status("order-1:1")
    status = hub.status("order-1:1", show_history=True)
    with_output = hub.status("order-1:1", show_history=True, show_history_output=True)

    assert not hasattr(plain, "historyEvents")
    # The extension names the field historyEvents: the SDK keeps it as an extra attribute.
    assert status.history is None
    events = status.historyEvents
    assert [e["EventType"] for e in events] == [
        "ExecutionStarted",
        "TaskCompleted",
        "TimerCreated",
        "EventRaised",
        "TaskCompleted",
        "ExecutionCompleted",
    ]
    assert events[0]["FunctionName"] == SAMPLE
    assert events[1]["FunctionName"] == "prepare"
    assert events[1]["ScheduledTime"] == "2026-03-01T08:00:00.000000Z"
    assert "Result" not in events[1]
    assert events[-1]["OrchestrationStatus"] == "Completed"
    assert all("EventId" not in e and "IsPlayed" not in e and "TaskScheduledId" not in e for e in events)
    assert with_output.historyEvents[1]["Result"] == "prepared"
    assert with_output.historyEvents[-1]["Result"]["outcome"] == "replied"


# --- terminate --------------------------------------------------------------------------------------


def test_terminate_a_running_instance_is_202(hub):
    hub.start()
    hub.engine.run_until_idle()

    assert hub.run(hub.client.terminate("order-1:1", "deadline missed; recovered")) is None
    hub.engine.run_until_idle()

    status = hub.status("order-1:1")
    assert status.runtime_status is OrchestrationRuntimeStatus.Terminated
    assert status.output == "deadline missed; recovered"  # the reason travelled URL-encoded
    hub.start(instance_id="order-2:1")
    assert hub.raw("POST", "instances/order-2:1/terminate?reason=x")[::2] == (202, b"")


def test_terminate_an_unknown_instance_is_404(hub):
    with pytest.raises(Exception, match=r"^No instance with ID 'nobody' found\.$"):
        hub.run(hub.client.terminate("nobody", "stop"))

    assert hub.raw("POST", "instances/nobody/terminate?reason=x")[::2] == (404, b"")


def test_terminate_a_finished_instance_is_410_and_changes_nothing(hub):
    hub.start()
    hub.complete()

    assert hub.run(hub.client.terminate("order-1:1", "too late")) is None  # the SDK ignores a 410

    assert hub.raw("POST", "instances/order-1:1/terminate?reason=x")[::2] == (410, b"")
    status = hub.status("order-1:1")
    assert status.runtime_status is OrchestrationRuntimeStatus.Completed
    assert status.output["outcome"] == "replied"


# --- purge (HandleDeleteHistoryByIdRequestAsync, HandleDeleteHistoryWithFiltersRequestAsync) -------------

FINISHED = [
    OrchestrationRuntimeStatus.Completed,
    OrchestrationRuntimeStatus.Failed,
    OrchestrationRuntimeStatus.Terminated,
]


def test_purge_by_filter_deletes_the_instances_created_in_the_range_with_those_statuses(hub):
    clock = hub.engine._clock  # type: ignore[attr-defined]
    hub.start("old-done:1")
    hub.complete("old-done:1")
    hub.start("old-running:1")
    hub.engine.run_until_idle()
    clock.advance(timedelta(minutes=3))  # within the running one's 5-minute deadline
    hub.start("new-done:1")
    hub.complete("new-done:1")

    window = (T0 - timedelta(days=1), T0 + timedelta(minutes=1))
    result = hub.run(hub.client.purge_instance_history_by(*window, FINISHED))

    assert result.instances_deleted == 1
    assert not hub.status("old-done:1")  # 404: the falsy status
    assert hub.engine_status("old-running:1") is OrchestrationRuntimeStatus.Running
    assert hub.engine_status("new-done:1") is OrchestrationRuntimeStatus.Completed
    # nothing left to delete: the extension's 404 with no content, which the SDK reads as none deleted
    assert hub.run(hub.client.purge_instance_history_by(*window, FINISHED)).instances_deleted == 0
    query = (
        "createdTimeFrom=2026-02-01T00:00:00.000000Z&createdTimeTo=2026-03-01T08:01:00.000000Z&runtimeStatus=Completed"
    )
    assert hub.raw("DELETE", "instances/?" + query)[::2] == (404, b"")


def test_purge_by_filter_wire_answers(hub):
    hub.start("a:1")
    hub.complete("a:1")
    # createdTimeFrom is required: 400 with a JSON string (the SDK refuses to send one without it)
    code, _, body = hub.raw("DELETE", "instances/?runtimeStatus=Completed")
    assert (code, json.loads(body)) == (400, "Please provide value for 'createdTimeFrom' parameter.")
    with pytest.raises(ValueError, match="created_time_from is required"):
        hub.run(hub.client.purge_instance_history_by(None, None, FINISHED))
    # runtime status names are Enum.TryParse'd: an unknown one is skipped; createdTimeTo absent: now
    code, headers, body = hub.raw(
        "DELETE", "instances?createdTimeFrom=2026-03-01T07:00:00Z&runtimeStatus=Nonsense,Completed"
    )
    assert (code, json.loads(body)) == (200, {"instancesDeleted": 1})
    assert headers["Content-Type"].startswith("application/json")


def test_purge_by_filter_without_statuses_takes_a_running_instance_too(hub):
    # as the storage provider does: the app must name the statuses (the runner's engine then drops its queued work)
    hub.start("running:1")
    result = hub.run(hub.client.purge_instance_history_by(T0 - timedelta(days=1), None, None))
    assert result.instances_deleted == 1
    hub.engine.run_until_idle()
    assert hub.engine.instance("running:1") is None


def test_purge_one_instance(hub):
    hub.start("done:1")
    hub.complete("done:1")
    hub.start("running:1")
    hub.engine.run_until_idle()

    assert hub.run(hub.client.purge_instance_history("done:1")).instances_deleted == 1
    assert not hub.status("done:1")
    assert hub.run(hub.client.purge_instance_history("done:1")).instances_deleted == 0  # 404
    assert hub.raw("DELETE", "instances/done:1")[::2] == (404, b"")
    # a running one is refused: 412 with a JSON string; the SDK raises for a status it does not expect
    code, _, body = hub.raw("DELETE", "instances/running:1")
    assert code == 412
    assert "only orchestrations in a terminal state can be purged" in json.loads(body).lower()
    with pytest.raises(Exception, match="unexpected status code 412"):
        hub.run(hub.client.purge_instance_history("running:1"))
    assert hub.engine_status("running:1") is OrchestrationRuntimeStatus.Running


# --- what the runner does not emulate ----------------------------------------------------------------


def test_other_routes_are_404_and_unemulated_operations_501(hub):
    hub.start()

    assert hub.raw("GET", "orchestrators/reply_or_deadline_orchestrator")[0] == 404
    assert hub.raw("POST", "instances/order-1:1/nonsense")[0] == 404
    assert hub.raw("GET", "elsewhere")[0] == 404
    assert hub.raw("GET", hub.api.base_url.replace("/runtime/webhooks/durabletask/", "/api/x"))[0] == 404
    assert hub.raw("POST", "instances/order-1:1/suspend?reason=x")[0] == 501
    assert hub.raw("GET", "instances/")[0] == 501
    # The public webhook path answers like the RPC path.
    assert hub.raw("GET", hub.api.base_url + "instances/order-1:1")[0] == 202


# --- threads and event loops ----------------------------------------------------------------------


def test_engine_access_waits_for_the_lock(hub):
    hub.start()
    answers: list[int] = []
    with hub.api.lock:
        request = threading.Thread(target=lambda: answers.append(hub.raw("GET", "instances/order-1:1")[0]))
        request.start()
        request.join(timeout=0.3)
        assert request.is_alive()
        assert answers == []
    request.join(timeout=10)
    assert answers == [202]


def test_concurrent_calls_on_the_one_loop_are_all_answered(hub):
    ids = [f"order-{n}:1" for n in range(12)]

    async def start_all() -> list[str]:
        return list(await asyncio.gather(*(hub.client.start_new(SAMPLE, i, ORDER) for i in ids)))

    assert hub.run(start_all()) == ids
    hub.engine.run_until_idle()

    async def reply_all() -> None:
        await asyncio.gather(*(hub.client.raise_event(i, REPLY_EVENT, {"outcome": i}) for i in ids))

    hub.run(reply_all())
    hub.engine.run_until_idle()
    assert [hub.status(i).output["finished"]["done"]["outcome"] for i in ids] == ids
    assert hub.api.requests == 2 * len(ids) + len(ids)


LOOP_PER_CALL = """
import asyncio
from datetime import UTC, datetime
import azure.durable_functions as df
from adapters.clock import ManualClock
from localrun.durable.engine import DurableEngine
from localrun.durable.http_api import DurableExtensionApi
from localrun.durable.registry import registered_orchestrators
from tests.localrun.durable_samples import FUNCTIONS

clock = ManualClock(datetime(2026, 3, 1, tzinfo=UTC))
engine = DurableEngine(registered_orchestrators(FUNCTIONS), lambda n, v: None, clock)
api = DurableExtensionApi(engine)
api.start()
client = df.DurableOrchestrationClient(api.client_binding_json())
for attempt in range(3):
    try:
        asyncio.run(client.start_new("reply_or_deadline_orchestrator", f"order-{attempt}:1", None))
        print("started", attempt)
    except Exception as error:
        print("failed", attempt, type(error).__name__, error)
print("requests", api.requests, "instances", len(engine.instances()))
"""


def test_a_second_event_loop_cannot_use_the_client():
    """``asyncio.run`` per call (what the runner did per invocation): the first call creates the
    SDK's process-wide session on its loop; every later call, on a new loop, finds that session
    (not closed, so not replaced) and fails before sending anything. The error is a RuntimeError,
    not an aiohttp error, so the SDK never resets the session: the client stays broken, and app code
    that catches ``Exception`` around ``raise_event`` would log and carry on."""
    run = subprocess.run(
        [sys.executable, "-c", LOOP_PER_CALL], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert run.stdout.splitlines() == [
        "started 0",
        "failed 1 RuntimeError Event loop is closed",
        "failed 2 RuntimeError Event loop is closed",
        "requests 1 instances 1",
    ]
