"""A Service Bus namespace below the real ``azure-servicebus`` SDK's AMQP client, for the token path: the SDK's own
``_open`` (``create_authentication``: the app's credential, ``DefaultAzureCredential`` asking the managed identity
endpoint), its pyamqp ``SendClient`` and the real ``CBSAuthenticator`` (token fetch, put-token, its state machine
and the errors it raises), the SDK's retry loop and its error mapping; only the connection, session and links under
the CBS authenticator are stand-ins (no AMQP server here).

What the namespace answers, as Service Bus does with Microsoft Entra ID: the CBS put-token of a token it does not
take (another audience, expired, not a JWT) is answered 401 (the SDK's ``TokenAuthFailure``, raised as
``ServiceBusAuthenticationError``); a token of a principal without a data role on the namespace is taken, and the
link's attach is refused ``amqp:unauthorized-access`` ("Unauthorized access. 'Send' claim(s) are required": the SDK's
``ServiceBusAuthorizationError``)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

AUDIENCE = "https://servicebus.azure.net/"
UNAUTHORIZED_SEND = "Unauthorized access. 'Send' claim(s) are required to perform this operation."
UNAUTHORIZED_LISTEN = "Unauthorized access. 'Listen' claim(s) are required to perform this operation."


def _claims(token: str) -> dict[str, Any] | None:
    try:
        payload = token.split(".")[1]
        return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))
    except (IndexError, ValueError):
        return None


@dataclass
class Namespace:
    """``principals``: the client ids holding a data role on the namespace; ``denied``: queues that refuse them all
    the same (a submitter's queue whose owner gave the app no role). ``audience``: the one its tokens must be for.
    ``sent``: per queue, the MessageIds it stored. ``put_tokens``: (status, reason) of every put-token."""

    principals: list[str]
    denied: set[str] = field(default_factory=set)
    audience: str = AUDIENCE
    sent: dict[str, list[str]] = field(default_factory=dict)
    put_tokens: list[tuple[int, str]] = field(default_factory=list)
    _tokens: dict[int, str] = field(default_factory=dict)  # the principal of the token each connection put

    def put_token(self, connection: int, token: str) -> tuple[int, str]:
        claims = _claims(token)
        if claims is None:
            answer = (401, "InvalidSignature: the token is not a JWT")
        elif not float(claims.get("exp", 0)) > time.time():
            answer = (401, "ExpiredToken: the token has expired")
        elif claims.get("aud") != self.audience:
            answer = (401, f"InvalidAudience: the token's audience {claims.get('aud')} is not Service Bus")
        else:
            self._tokens[connection] = str(claims.get("appid") or claims.get("oid"))
            answer = (200, "OK")
        self.put_tokens.append(answer)
        return answer

    def authorized(self, connection: int, queue: str) -> bool:
        return self._tokens.get(connection) in self.principals and queue not in self.denied


class _MgmtLink:
    def __init__(self, namespace: Namespace, connection: int, on_open: Any) -> None:
        self._namespace, self._connection, self._on_open = namespace, connection, on_open

    def open(self) -> None:
        from azure.servicebus._pyamqp.constants import ManagementOpenResult

        self._on_open(ManagementOpenResult.OK)

    def close(self) -> None:
        pass

    def execute_operation(self, message: Any, on_complete: Any, **_kwargs: Any) -> None:
        from azure.servicebus._pyamqp.constants import ManagementExecuteOperationResult

        token = message.value.decode() if isinstance(message.value, bytes) else str(message.value)
        status, reason = self._namespace.put_token(self._connection, token)
        result = (
            ManagementExecuteOperationResult.OK if status == 200 else ManagementExecuteOperationResult.FAILED_BAD_STATUS
        )
        on_complete(result, status, reason, None)


class _Link:
    _is_closed = False
    remote_max_message_size = 256 * 1024

    def __init__(self, namespace: Namespace, connection: int) -> None:
        self._namespace, self._connection = namespace, connection

    def attach(self) -> None:
        pass

    def get_state(self) -> Any:
        from azure.servicebus._pyamqp.constants import LinkState

        return LinkState.ATTACHED

    def detach(self, close: bool = False) -> None:
        self._is_closed = True


class _Session:
    name = "session"

    def __init__(self, namespace: Namespace, connection: Any) -> None:
        self._namespace, self._connection = namespace, connection

    def create_request_response_link_pair(self, on_amqp_management_open_complete: Any, **_kwargs: Any) -> _MgmtLink:
        return _MgmtLink(self._namespace, id(self._connection), on_amqp_management_open_complete)

    def create_sender_link(self, target_address: Any = None, **_kwargs: Any) -> _Link:
        from azure.servicebus._pyamqp.error import AMQPLinkError, ErrorCondition

        queue = str(getattr(target_address, "address", target_address)).rsplit("/", 1)[-1]
        if not self._namespace.authorized(
            id(self._connection), queue
        ):  # the service detaches the attach, with its error
            raise AMQPLinkError(condition=ErrorCondition.UnauthorizedAccess, description=UNAUTHORIZED_SEND)
        return _Link(self._namespace, id(self._connection))

    def create_receiver_link(self, source_address: Any = None, **_kwargs: Any) -> _Link:
        from azure.servicebus._pyamqp.error import AMQPLinkError, ErrorCondition

        queue = str(getattr(source_address, "address", source_address)).split("/")[3]
        if not self._namespace.authorized(id(self._connection), queue):
            raise AMQPLinkError(condition=ErrorCondition.UnauthorizedAccess, description=UNAUTHORIZED_LISTEN)
        return _Link(self._namespace, id(self._connection))

    def end(self) -> None:
        pass


class _Connection:
    _container_id = "connection"

    def listen(self, wait: float = 0, **_kwargs: Any) -> None:
        time.sleep(0.001)

    def close(self) -> None:
        pass


@contextmanager
def namespace_below_the_sdk(monkeypatch: pytest.MonkeyPatch, namespace: Namespace) -> Iterator[Namespace]:
    """Every pyamqp client the SDK opens in the block connects to ``namespace``."""
    from azure.servicebus._pyamqp import client as pyamqp
    from azure.servicebus._pyamqp.cbs import CBSAuthenticator
    from azure.servicebus._pyamqp.constants import AUTH_TYPE_CBS

    def open_client(self: Any, connection: Any = None) -> None:
        if self._session:
            return
        self._connection = _Connection()
        self._session = _Session(namespace, self._connection)
        if self._auth.auth_type == AUTH_TYPE_CBS:
            self._cbs_authenticator = CBSAuthenticator(
                session=self._session, auth=self._auth, auth_timeout=self._auth_timeout
            )
            self._cbs_authenticator.open()
        self._shutdown = False

    def send_message(self: Any, message: Any, *, timeout: float = 0, **_kwargs: Any) -> None:
        queue = str(self.target).rsplit("/", 1)[-1]
        namespace.sent.setdefault(queue, []).append(str(message.properties.message_id))

    monkeypatch.setattr(pyamqp.AMQPClient, "open", open_client)
    monkeypatch.setattr(pyamqp.SendClient, "send_message", send_message)
    yield namespace
