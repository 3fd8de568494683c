"""Routing and answers of the extension's HTTP API over a ``DurableEngine``, without sockets:
``ExtensionApi.handle`` takes a request (method, target, content type, body) and returns an
``Answer`` (status, headers, body), as ``HttpApiHandler.HandleRequestAsync`` does.

Served: start (``POST orchestrators/{name}[/{id}]``), raise event
(``POST instances/{id}/raiseEvent/{name}``), status (``GET instances/{id}``), terminate
(``POST instances/{id}/terminate``) and purge (``DELETE instances/{id}``,
``DELETE instances?createdTimeFrom=..&createdTimeTo=..&runtimeStatus=..``). The extension's other
operations (list, rewind, restart, suspend, resume, entities) answer 501: the runner does not emulate them.

Every engine call happens under the lock given, so handler threads never interleave inside the
engine. Nothing here sleeps or reads a clock: the engine stamps times from its injected clock.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlsplit

from azure.durable_functions import OrchestrationRuntimeStatus

from localrun.durable.engine import DurableEngine
from localrun.durable.extension_api.status import IN_PROGRESS, history_events, status_payload
from localrun.durable.extension_api.urls import RPC_PATH, WEBHOOK_PATH, ExtensionUrls

JSON_CONTENT = "application/json; charset=utf-8"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


def empty(status: int) -> Answer:
    """``request.CreateResponse(status)``: no content at all."""
    return Answer(status)


def json_answer(status: int, value: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, json.dumps(value).encode(), {"Content-Type": JSON_CONTENT, **(headers or {})})


def error_answer(status: int, message: str, error: BaseException | str | None = None) -> Answer:
    """``request.CreateErrorResponse``: an ``HttpError``; with an exception and a local caller
    (error detail included) also its message and type."""
    body: dict[str, Any] = {"Message": message}
    if isinstance(error, BaseException):
        body |= {"ExceptionMessage": str(error), "ExceptionType": type(error).__name__, "StackTrace": None}
    elif error is not None:  # an engine refusal: the message of the .NET ArgumentException
        body |= {"ExceptionMessage": error, "ExceptionType": "System.ArgumentException", "StackTrace": None}
    return json_answer(status, body)


class Query:
    """The query string as .NET's ``NameValueCollection``: names compared ignoring case."""

    def __init__(self, text: str) -> None:
        self._values = {name.lower(): value for name, value in parse_qsl(text, keep_blank_values=True)}

    def get(self, name: str) -> str | None:
        return self._values.get(name.lower())

    def flag(self, name: str, default: bool) -> bool:
        """``bool.TryParse``: ``true``/``false`` in any case; anything else leaves the default."""
        value = (self.get(name) or "").strip().lower()
        return {"true": True, "false": False}.get(value, default)


class ExtensionApi:
    def __init__(self, engine: DurableEngine, urls: ExtensionUrls, lock: threading.Lock) -> None:
        self._engine = engine
        self._urls = urls
        self._lock = lock

    def handle(self, method: str, target: str, content_type: str | None, body: bytes) -> Answer:
        try:
            return self._route(method.upper(), target, content_type, body)
        except Exception as error:  # HandleRequestAsync's last resort
            return error_answer(500, "Something went wrong while processing your request", error)

    def _route(self, method: str, target: str, content_type: str | None, body: bytes) -> Answer:
        parts = urlsplit(target)
        rest = _strip_base(parts.path)
        if rest is None:
            return empty(404)
        # WebUtility.UrlDecode of the whole path, then matched segment by segment.
        segments = unquote_plus(rest).strip("/").split("/")
        query = Query(parts.query)
        head = segments[0].lower()
        if head == "orchestrators" and len(segments) in (2, 3):
            if method != "POST":
                return empty(404)
            return self._start(segments[1], segments[2] if len(segments) == 3 else "", body)
        if head == "instances" and len(segments) <= 3:
            return self._instances(method, segments[1:], query, target)
        if head == "instances" and len(segments) == 4 and segments[2].lower() == "raiseevent":
            if method != "POST":
                return empty(404)
            return self._raise_event(segments[1], segments[3], content_type, body)
        if head in ("entities", "makeprimary"):
            return _not_emulated(head)
        return empty(404)

    def _instances(self, method: str, rest: list[str], query: Query, target: str) -> Answer:
        instance_id = rest[0] if rest and rest[0] else None
        operation = rest[1].lower() if len(rest) == 2 and rest[1] else None
        if instance_id is None:  # list instances / purge by filter
            if method == "DELETE":
                return self._purge_by(query)
            return _not_emulated("instance queries") if method == "GET" else empty(404)
        if operation is None:
            if method == "GET":
                return self._status(instance_id, query, target)
            return self._purge(instance_id) if method == "DELETE" else empty(404)
        if method != "POST":
            return empty(404)
        if operation == "terminate":
            return self._terminate(instance_id, query)
        if operation in ("rewind", "restart", "suspend", "resume"):
            return _not_emulated(operation)
        return empty(404)

    # --- the four operations the Python client uses ---------------------------------------------

    def _start(self, name: str, instance_id: str, body: bytes) -> Answer:
        input_json: str | None = None
        if body:
            try:
                token = json.loads(body)
            except ValueError as error:
                return error_answer(400, "Invalid JSON content", error)
            input_json = _as_json_text(token)
        with self._lock:
            response = self._engine.start(name, instance_id or None, input_json)
        if response.status == 202:
            started = str(response.body["id"])
            links = self._urls.check_status_body(started)
            return json_answer(202, links, {"Location": links["statusQueryGetUri"], "Retry-After": "10"})
        if response.status == 409:  # OrchestrationAlreadyExistsException -> CreateErrorResponse(409, message)
            return error_answer(409, str(response.body))
        if response.status == 400:  # an ArgumentException reaching HandleRequestAsync's catch
            return error_answer(
                400, "One or more of the arguments submitted is incorrect", response.body["ExceptionMessage"]
            )
        return json_answer(response.status, response.body)

    def _raise_event(self, instance_id: str, event_name: str, content_type: str | None, body: bytes) -> Answer:
        with self._lock:
            instance = self._engine.instance(instance_id)
            if instance is None:
                return empty(404)
            if instance.is_finished:
                return empty(410)
            media_type = (content_type or "").split(";")[0].strip().lower()
            if media_type != "application/json":
                return error_answer(400, "Only application/json request content is supported")
            try:
                token = json.loads(body)
            except ValueError as error:
                return error_answer(400, "Invalid JSON content", error)
            response = self._engine.raise_event(instance_id, event_name, _as_json_text(token))
        return empty(response.status)

    def _status(self, instance_id: str, query: Query, target: str) -> Answer:
        show_input = query.flag("showInput", True)
        fail_with_500 = query.flag("returnInternalServerErrorOnFailure", False)
        with self._lock:
            instance = self._engine.instance(instance_id)
            if instance is None:
                return empty(404)
            history = None
            if query.flag("showHistory", False):
                history = history_events(
                    instance.history, show_input=show_input, show_output=query.flag("showHistoryOutput", False)
                )
            payload = status_payload(instance, show_input=show_input, history=history)
            runtime = instance.status
        if runtime in IN_PROGRESS:
            return json_answer(202, payload, {"Location": self._urls.origin + target, "Retry-After": "5"})
        if runtime is OrchestrationRuntimeStatus.Failed and fail_with_500:
            return json_answer(500, payload)
        return json_answer(200, payload)

    def _purge(self, instance_id: str) -> Answer:
        """``HandleDeleteHistoryByIdRequestAsync``: 404 unknown, 412 not finished (a JSON string saying so),
        200 with ``PurgeHistoryResult``."""
        with self._lock:
            response = self._engine.purge(instance_id)
        if response.status == 404:
            return empty(404)
        return json_answer(response.status, response.body)

    def _purge_by(self, query: Query) -> Answer:
        """``HandleDeleteHistoryWithFiltersRequestAsync``: ``createdTimeFrom`` required (400, a JSON string, when
        missing or unreadable), ``createdTimeTo`` now when absent or unreadable, ``runtimeStatus`` a comma-separated
        list of ``OrchestrationStatus`` names (unknown ones skipped; none: any status). Nothing deleted is 404 with
        no content; else 200 with ``PurgeHistoryResult``."""
        created_from = _query_time(query.get("createdTimeFrom"))
        if created_from is None:
            return json_answer(400, "Please provide value for 'createdTimeFrom' parameter.")
        statuses = frozenset(
            OrchestrationRuntimeStatus(name)
            for name in (query.get("runtimeStatus") or "").split(",")
            if name in _STATUS_NAMES
        )
        created_to = _query_time(query.get("createdTimeTo"))
        with self._lock:
            deleted = self._engine.purge_by(created_from, created_to, statuses)
        if deleted == 0:
            return empty(404)
        return json_answer(200, {"instancesDeleted": deleted})

    def _terminate(self, instance_id: str, query: Query) -> Answer:
        with self._lock:
            response = self._engine.terminate(instance_id, query.get("reason") or "")
        return empty(response.status)


# ``Enum.TryParse<OrchestrationStatus>``: the names as they are spelled (case counts).
_STATUS_NAMES = frozenset(status.value for status in OrchestrationRuntimeStatus)


def _query_time(text: str | None) -> datetime | None:
    """``TryGetDateTimeQueryParameterValue`` for what the SDK sends (``%Y-%m-%dT%H:%M:%S.%fZ``) and other ISO 8601
    times; a time without an offset is UTC (the extension's host runs in UTC). None: absent or unreadable."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _strip_base(path: str) -> str | None:
    """The path after the RPC listener's or the webhook's base path, or None for neither."""
    for base in (RPC_PATH, WEBHOOK_PATH + "/"):
        if path.startswith(base):
            return path[len(base) :]
    return None


def _as_json_text(token: Any) -> str:
    """The serialized payload the engine stores. The Python SDK posts its ``df_dumps`` text as a
    JSON string, and the extension hands that string's content on to the orchestrator; any other
    JSON value is its own serialization."""
    return token if isinstance(token, str) else json.dumps(token)


def _not_emulated(what: str) -> Answer:
    return error_answer(501, f"The local runner does not emulate the Durable extension's {what} API.")
