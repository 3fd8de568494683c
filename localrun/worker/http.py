"""HTTP triggers as the Functions host runs them: route matching, the request as ``RpcHttp`` and the
``$return`` http output read back.

The host matches a request against each HTTP function's ``route`` (prefixed by host.json's
``extensions.http.routePrefix``, default ``api``) and ``methods``, with ASP.NET routing: literal
segments case-insensitive, ``{name}`` / ``{name:constraint}`` / ``{name?}`` / ``{*name}`` parameters,
and the most literal template first. It sends the request as ``TypedData(http=RpcHttp(...))``:
method, url, headers, query, route ``params`` and the body. The worker declares ``RawHttpBodyBytes``,
``RpcHttpBodyOnly`` and ``RpcHttpTriggerMetadataRemoved`` (``azure_functions_runtime.handle_event``),
so the body goes as bytes, no ``rawBody``, and no HTTP trigger metadata. The function's return
(``$return``, an ``http`` output) comes back as ``RpcHttp`` with ``status_code``, headers and body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit


@dataclass(frozen=True)
class HttpRequestData:
    method: str
    url: str  # absolute, as the host passes it
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class _Segment:
    literal: str | None
    name: str | None = None
    optional: bool = False
    catch_all: bool = False


class RouteTemplate:
    def __init__(self, prefix: str, route: str) -> None:
        text = "/".join(p for p in (prefix.strip("/"), route.strip("/")) if p)
        self.text = text
        self.segments: list[_Segment] = []
        for part in text.split("/") if text else []:
            match = re.fullmatch(r"\{(\*?)([A-Za-z_][A-Za-z0-9_]*)(\?)?(?::[^}]*)?\}", part)
            if match:
                self.segments.append(_Segment(None, match.group(2), bool(match.group(3)), bool(match.group(1))))
            else:
                self.segments.append(_Segment(part.lower()))

    @property
    def literals(self) -> int:
        return sum(s.literal is not None for s in self.segments)

    def match(self, path: str) -> dict[str, str] | None:
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        params: dict[str, str] = {}
        for index, segment in enumerate(self.segments):
            if segment.catch_all:
                params[str(segment.name)] = "/".join(parts[index:])
                return params
            if index >= len(parts):
                if segment.optional:
                    continue
                return None
            if segment.literal is not None:
                if parts[index].lower() != segment.literal:
                    return None
            else:
                params[str(segment.name)] = parts[index]
        return params if len(parts) <= len(self.segments) else None


def route_of(trigger: dict[str, Any], function_name: str) -> str:
    """An HTTP trigger's route: its ``route``, or the function's name when it has none."""
    return str(trigger.get("route") or function_name)


def methods_of(trigger: dict[str, Any]) -> set[str]:
    methods = trigger.get("methods")
    if not methods:
        return {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}
    return {str(m).upper() for m in methods}


def host_query(url: str) -> dict[str, str]:
    """The query parameters of ``url`` as the Functions host hands them to the worker (``RpcHttp.query``, built
    from ASP.NET Core's ``request.Query``: ``http.Query.Add(pair.Key, pair.Value.ToString())``): names compared
    case-insensitively, the first spelling kept; a name given several times holds its values joined by commas
    (``StringValues.ToString``, which skips empty ones), so ``?pageSize=5&pageSize=7`` reaches the function as
    ``"5,7"``, not the last value; a name whose value is empty is left out (the host adds only a non-empty one:
    this worker does not declare ``UseNullableValueDictionaryForHttp``)."""
    values: dict[str, list[str]] = {}
    spelling: dict[str, str] = {}
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        key = spelling.setdefault(name.lower(), name)
        values.setdefault(key, []).append(value)
    joined = {name: ",".join(v for v in given if v) for name, given in values.items()}
    return {name: value for name, value in joined.items() if value}


def request_typed_data(protos: ModuleType, request: HttpRequestData, route_params: dict[str, str]) -> Any:
    query = host_query(request.url)
    return protos.TypedData(
        http=protos.RpcHttp(
            method=request.method.upper(),
            url=request.url,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=protos.TypedData(bytes=request.body),
            params=route_params,
            query=query,
        )
    )


def answer_from(data: Any) -> HttpAnswer:
    """The function's ``$return`` http output as the host turns it into a response."""
    if data is None or data.WhichOneof("data") != "http":
        raise ValueError("the function returned no http output")
    http = data.http
    body_data = http.body
    kind = body_data.WhichOneof("data")
    if kind == "bytes":
        body = bytes(body_data.bytes)
    elif kind in ("string", "json"):
        body = str(getattr(body_data, kind)).encode("utf-8")
    else:
        body = b""
    return HttpAnswer(int(http.status_code or 200), dict(http.headers), body)
