"""``RemoteService`` over HTTP, for a real endpoint: ``POST {base_url}/{action}`` with a JSON body
and the idempotency key and fencing token as headers.

429, 408, 5xx, timeouts and connection failures are transient (the same call may succeed later);
any other 4xx is permanent. A 2xx whose body the app cannot read (not UTF-8, not JSON, not an object,
a number or a nesting it cannot carry) is transient too: the provider acted, and the app does not know
what it did, so it is an unknown outcome, as a timeout is, never a refusal (a refusal sends the step
to the fallback provider under the same key, which charged a second time). So is an answer
``http.client`` cannot read at all (a status line, headers or body it refuses: ``HTTPException``, or the
``ValueError`` of a chunk size that is not hex): the call was sent. So is an answer over ``MAX_ANSWER_BYTES``
(the reply that carries it could not), read no further. Uses only the standard library.

``timeout_seconds`` bounds the call, not each wait: ``urllib``'s ``timeout`` is a socket timeout (the connection
to each address, each send, each receive), so an answer trickling in a byte at a time would hold the agent for
as long as it kept coming. Each receive waits only what is left of the call's time, counted from its start
(``_Deadline``); connecting and sending keep the socket timeout.

The contract a real provider must honour (docs/compensation.md, "What a remote service must offer"):

- ``Idempotency-Key``: the same key and action give the same result and no second side effect;
- a second call with a key whose first call is still running waits for it or answers 429/503, never
  409 (any other 4xx is read as a refusal, and a refusal while the first call may still charge sends
  the step to the fallback provider or to compensation);
- ``X-Fencing-Token``: a token lower than the highest seen for the key is refused (4xx);
- ``X-Fences-Idempotency-Key`` (undo calls only): the forward key this undo cancels. Taking the undo
  fences that key, atomically with the undo: the undo reverses whatever the key did before it, and
  any forward call with that key that arrives or commits after it is refused (409), never performed.
  Without it a forward call still in flight when its undo ran (outcome unknown) would take effect
  after the order was compensated;
- an undo's answer says what it undid: a refund answers ``refundId`` (null when there was nothing to
  refund) and ``amountCents``; the compensation log keeps it, and a prepaid order none of whose
  refunds returned money raises ``PrepaymentToRelease``."""

from __future__ import annotations

import functools
import http.client
import io
import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

from adapters.remote.interface import RemoteCall, RemoteError
from contracts.parsing import MAX_BODY_BYTES, read_outside_json
from settings import REMOTE_CALL_TIMEOUT

TRANSIENT_STATUSES = frozenset({408, 429})
FENCES_HEADER = "X-Fences-Idempotency-Key"


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUSES or status >= 500


# The largest answer read: the agent's reply carries it to the orchestration, and a reply body over
# ``MAX_BODY_BYTES`` is refused (a larger answer could never be carried; reading it all only cost memory).
MAX_ANSWER_BYTES = MAX_BODY_BYTES
# How much of an error answer's body is read for the failure's detail (300 characters of it are kept).
ERROR_DETAIL_BYTES = 4096


class HttpRemoteService:
    def __init__(self, base_url: str, timeout_seconds: float = REMOTE_CALL_TIMEOUT.total_seconds()) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"service URL must be http(s), got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_seconds = timeout_seconds

    def build_request(self, call: RemoteCall) -> urllib.request.Request:
        body = {"service": call.service, "orderId": call.order_id, "payload": call.payload}
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Idempotency-Key": call.idempotency_key,
            "X-Fencing-Token": str(call.fencing_token),
        }
        if call.fences_key is not None:
            headers[FENCES_HEADER] = call.fences_key
        for name, value in headers.items():
            # what ``http.client`` would refuse while sending, refused here, before anything is sent: a
            # refusal (nothing was done), not the unknown outcome of an answer it cannot read
            if not (value.isascii() and value.isprintable()):
                raise RemoteError(f"header {name} {value[:40]!r} cannot be sent (visible ASCII only)", transient=False)
        return urllib.request.Request(
            f"{self.base_url}/{call.action}", data=json.dumps(body).encode("utf-8"), method="POST", headers=headers
        )

    def call(self, request: RemoteCall) -> dict[str, Any]:
        where = f"{request.service}.{request.action} at {self.base_url}"
        built = self.build_request(request)
        opener = _opener(time.monotonic() + self.timeout_seconds)
        try:
            with opener.open(built, timeout=self.timeout_seconds) as response:
                raw = response.read(MAX_ANSWER_BYTES + 1)  # never more than the app could carry, whatever is sent
                if len(raw) <= MAX_ANSWER_BYTES and response.length:  # a read with a limit returns a body cut
                    raise http.client.IncompleteRead(raw, response.length)  # short as it came: it is malformed
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            raise RemoteError(
                f"{where} answered HTTP {exc.code}: {detail}", transient=is_transient_status(exc.code)
            ) from exc
        except TimeoutError as exc:
            raise RemoteError(
                f"{where} timed out after {self.timeout_seconds}s", transient=True, timed_out=True
            ) from exc
        except (urllib.error.URLError, ConnectionError) as exc:
            raise RemoteError(f"{where} unreachable: {exc}", transient=True) from exc
        except (http.client.HTTPException, ValueError) as exc:
            # After ``build_request``, whose headers are checked: the call was sent, its answer is unreadable.
            raise RemoteError(f"{where} answered malformed HTTP: {type(exc).__name__}: {exc}", transient=True) from exc
        if len(raw) > MAX_ANSWER_BYTES:
            raise RemoteError(
                f"{where} answered more than {MAX_ANSWER_BYTES} bytes, more than its reply can carry", transient=True
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteError(f"{where} answered a body that is not UTF-8 JSON", transient=True) from exc
        try:
            # Read so that what is accepted is carried exactly (replies, activities, documents, undo
            # requests); what cannot be is refused here, with the reason, not lost after the call. It
            # acted: an unknown outcome (transient), never a refusal (see the module's docstring).
            result = read_outside_json(text) if text else {}
        except json.JSONDecodeError as exc:
            raise RemoteError(f"{where} answered a body that is not JSON", transient=True) from exc
        except ValueError as exc:
            raise RemoteError(f"{where} answered a body the app cannot carry: {exc}", transient=True) from exc
        if not isinstance(result, dict):
            raise RemoteError(f"{where} answered JSON {type(result).__name__}, not an object", transient=True)
        return result


class _Deadline(io.RawIOBase):
    """A response's socket, read so that each receive waits at most until ``deadline`` (``time.monotonic``)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # holds the socket open once the connection lets it go
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self._sock.settimeout(left)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Answer(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        bounded = io.BufferedReader(_Deadline(sock, deadline))
        self.fp.close()
        self.fp = bounded  # type: ignore[assignment]  # a raw stream of the same socket, as ``makefile`` gives


class _HTTP(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_class = functools.partial(_Answer, deadline=deadline)  # type: ignore[assignment]


class _HTTPS(_HTTP, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_HTTP, deadline=self.deadline), req)  # type: ignore[arg-type]


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(_HTTPS, deadline=self.deadline)
        return self.do_open(connection, req, context=self._context)  # type: ignore[arg-type,attr-defined]


def _opener(deadline: float) -> urllib.request.OpenerDirector:
    """``urlopen``'s opener, its connections' answers read by ``deadline``."""
    return urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline))


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(ERROR_DETAIL_BYTES).decode("utf-8", errors="replace").strip()
    except (OSError, http.client.HTTPException, ValueError):  # an error body cut short or malformed
        text = ""
    return text[:300] or str(exc.reason)
