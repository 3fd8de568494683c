"""A managed identity endpoint as App Service (and so Flex Consumption) gives a function app: the platform sets
``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER`` in the app's environment, and ``azure.identity``'s
``ManagedIdentityCredential`` (alone, or inside ``DefaultAzureCredential``) asks it for a token with
``GET {IDENTITY_ENDPOINT}?api-version=2019-08-01&resource=<scope without /.default>&client_id=<id>`` and the header
``X-IDENTITY-HEADER`` (learn.microsoft.com/azure/app-service/overview-managed-identity, "REST endpoint reference").

This one answers on loopback for the identities it is given (user-assigned: a request must name one with
``client_id``; with no ``client_id`` only a system-assigned identity would answer, and a Bicep app has none, so it
is a 400 as there). Its tokens are unsigned JWTs whose payload the local Cosmos DB server reads
(``localrun/cosmos_auth.cjs``): ``aud`` the resource asked for, ``appid`` the client id, ``exp`` ``lifetime`` from
now. ``failing``: a status it answers every request with. ``stall_next``: how many of the next requests are taken
and never answered (an endpoint that hangs). Every request is recorded."""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

import pytest

from settings import SETTINGS

HEADER_VALUE = "local-identity-header"  # what the platform would put in IDENTITY_HEADER (not a secret here)
AZURE_TOKEN_CREDENTIALS = next(s.written for s in SETTINGS if s.name == "AZURE_TOKEN_CREDENTIALS")


def _segment(value: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


@dataclass(frozen=True)
class TokenRequest:
    resource: str
    client_id: str | None
    api_version: str | None
    header: str | None
    at: float


class IdentityEndpoint:
    def __init__(self, client_ids: list[str], lifetime: float = 3600.0) -> None:
        self.client_ids = client_ids
        self.lifetime = lifetime
        self.stall_next = 0  # the next requests taken and never answered
        self.failing: int | None = None  # a status every request is answered with (the endpoint failing)
        self.released = threading.Event()  # set on stop: a stalled request ends
        self.requests: list[TokenRequest] = []
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                request = TokenRequest(
                    query.get("resource", ""),
                    query.get("client_id"),
                    query.get("api-version"),
                    self.headers.get("X-IDENTITY-HEADER"),
                    time.time(),
                )
                with endpoint.lock:
                    endpoint.requests.append(request)
                    stalled = endpoint.stall_next > 0
                    endpoint.stall_next -= stalled
                if stalled:
                    endpoint.released.wait()
                    return
                status, body = endpoint.answer(request)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}/msi/token"

    def answer(self, request: TokenRequest) -> tuple[int, dict[str, object]]:
        if self.failing is not None:
            return self.failing, {"statusCode": self.failing, "message": "The managed identity endpoint failed (test)."}
        if request.header != HEADER_VALUE:
            return 401, {"error": "unauthorized", "error_description": "X-IDENTITY-HEADER missing or wrong"}
        if request.api_version != "2019-08-01" or not request.resource:
            return 400, {"error": "invalid_request", "error_description": "api-version or resource missing"}
        if request.client_id not in self.client_ids:
            return 400, {
                "statusCode": 400,
                "message": f"Unable to load the proper Managed Identity (client_id {request.client_id}).",
            }
        expires = int(time.time() + self.lifetime)
        client_id = request.client_id
        claims = {"aud": request.resource, "appid": client_id, "oid": f"oid-{client_id}", "exp": expires}
        token = f"{_segment({'alg': 'none', 'typ': 'JWT'})}.{_segment(claims)}.unsigned"
        return 200, {
            "access_token": token,
            "expires_on": str(expires),
            "resource": request.resource,
            "token_type": "Bearer",
            "client_id": request.client_id,
        }

    def for_resource(self, resource: str) -> list[TokenRequest]:
        return [r for r in self.requests if r.resource == resource]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> IdentityEndpoint:
        """The environment App Service gives the app (and nothing a developer machine would add: another credential's
        variables, a proxy the token requests to loopback would go through)."""
        monkeypatch.setenv("IDENTITY_ENDPOINT", self.url)
        monkeypatch.setenv("IDENTITY_HEADER", HEADER_VALUE)
        credentials = ("MSI_ENDPOINT", "MSI_SECRET", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET")
        proxies = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        for name in (*credentials, "AZURE_FEDERATED_TOKEN_FILE", *proxies):
            monkeypatch.delenv(name, raising=False)
        # ... and the app setting infra/modules/functionapp.bicep writes, which azure-identity reads itself
        monkeypatch.setenv("AZURE_TOKEN_CREDENTIALS", AZURE_TOKEN_CREDENTIALS)
        return self

    def __enter__(self) -> IdentityEndpoint:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
