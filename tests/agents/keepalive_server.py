"""A local HTTP/1.1 server that keeps its connections alive and answers each request as a test scripts it: the
remote end of ``tests/agents/test_http_connection_pool.py``. It counts the connections it accepted, records
each request with the connection it came on, and knows which connections the client still holds open."""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Received:
    connection: int  # the connection's number, in the order they were accepted
    nth: int  # the request's number on its connection (0: its first)
    line: str  # the request line
    headers: dict[str, str]  # names lower-cased
    body: bytes

    @property
    def key(self) -> str:
        return self.headers.get("idempotency-key", "")


def answer(body: bytes, status: str = "200 OK", headers: str = "") -> bytes:
    """A whole HTTP/1.1 answer with a ``Content-Length``."""
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status.encode(),
        len(body),
        headers.encode(),
        body,
    )


def echo(request: Received) -> bytes:
    """The default answer: a JSON object naming the request's key, so that each call can tell its own answer."""
    return json.dumps({"key": request.key, "connection": request.connection}).encode()


@dataclass(frozen=True)
class Reply:
    """What the server does with one request: waits ``delay`` seconds, sends ``raw`` (under TLS, as it is on the
    TCP connection if ``beneath_tls``), waits ``then_after`` seconds, sends ``then`` (bytes after the answer: a
    hazard for a pool), and closes the connection if ``close``. ``raw`` None: closed without an answer."""

    raw: bytes | None
    delay: float = 0.0
    then: bytes = b""
    then_after: float = 0.0
    close: bool = False
    beneath_tls: bool = False


@dataclass
class KeepAliveServer:
    script: Callable[[Received], Reply] = field(default=lambda request: Reply(answer(echo(request))))
    tls: ssl.SSLContext | None = None
    accepts: int = 0
    received: list[Received] = field(default_factory=list)
    closed_by_client: int = 0  # connections that ended with the client closing them
    closed_by_server: int = 0
    sent_after: int = 0  # replies whose ``then`` bytes were sent
    lock: threading.Lock = field(default_factory=threading.Lock)

    def open_connections(self) -> int:
        """Connections accepted and not closed by either end yet."""
        with self.lock:
            return self.accepts - self.closed_by_client - self.closed_by_server

    def accept(self, conn: socket.socket, stop: threading.Event) -> None:
        with self.lock:
            number = self.accepts
            self.accepts += 1
        self._connection(conn, number, stop)

    def _connection(self, conn: socket.socket, number: int, stop: threading.Event) -> None:
        by_server = False
        try:
            conn.settimeout(10)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            buffer = b""
            nth = 0
            while not stop.is_set():
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        with self.lock:
                            self.closed_by_client += 1
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                line, *fields = head.decode("latin-1").split("\r\n")
                headers = {name.strip().lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
                length = int(headers.get("content-length", "0"))
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                request = Received(number, nth, line, headers, body)
                nth += 1
                with self.lock:
                    self.received.append(request)
                reply = self.script(request)
                time.sleep(reply.delay)
                if reply.raw is None:
                    by_server = True
                    return
                if reply.beneath_tls:
                    os.write(conn.fileno(), reply.raw)
                else:
                    conn.sendall(reply.raw)
                time.sleep(reply.then_after)
                if reply.then:
                    conn.sendall(reply.then)
                    with self.lock:
                        self.sent_after += 1
                if reply.close:
                    by_server = True
                    return
        except (OSError, ValueError):
            by_server = True  # the client gave up (a timed-out call), or a TLS handshake it refused
        finally:
            if by_server:
                with self.lock:
                    self.closed_by_server += 1
            conn.close()


class Accepting(Protocol):
    def accept(self, conn: socket.socket, stop: threading.Event) -> None: ...


@contextmanager
def serving[S: Accepting](server: S) -> Iterator[tuple[S, int]]:
    """Runs ``server`` on 127.0.0.1, each connection it accepts handled on a thread of its own; yields it and its
    port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=server.accept, args=(conn, stop), daemon=True).start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield server, listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def settle(condition: Callable[[], bool], within: float = 2.0) -> bool:
    """Waits until ``condition`` holds (the server's threads see a close a moment after it happens)."""
    ends = time.monotonic() + within
    while not condition():
        if time.monotonic() > ends:
            return False
        time.sleep(0.01)
    return True


@dataclass(frozen=True)
class Certificates:
    """A test CA's certificate (PEM, for ``SSL_CERT_FILE``) and a server certificate it issued, with its key."""

    ca: str
    chain: str  # the server's certificate and key, one PEM file for ``load_cert_chain``


def issue(directory: str, names: list[str], addresses: list[str]) -> Certificates:
    """A new CA and a server certificate for ``names`` (DNS) and ``addresses`` (IP), written under ``directory``."""
    import datetime
    import ipaddress
    from pathlib import Path

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pool test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digital signature, certificate and CRL signing
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alternatives: list[x509.GeneralName] = [x509.DNSName(name) for name in names]
    alternatives += [x509.IPAddress(ipaddress.ip_address(address)) for address in addresses]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (names or addresses)[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = Path(directory) / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain_file = Path(directory) / "server.pem"
    chain_file.write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return Certificates(str(ca_file), str(chain_file))


def server_tls(certificates: Certificates) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.chain)
    return context


@dataclass
class TunnelProxy:
    """An HTTP proxy that only tunnels (``CONNECT``): it records each ``CONNECT`` head, answers 200 and relays the
    bytes both ways between the client and the host it asked for."""

    heads: list[str] = field(default_factory=list)

    def accept(self, client: socket.socket, stop: threading.Event) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            text = head.decode("latin-1").partition("\r\n\r\n")[0]
            self.heads.append(text)
            host, _, port = text.split(" ")[1].rpartition(":")
            with socket.create_connection((host, int(port)), timeout=10) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                back = threading.Thread(target=_relay, args=(upstream, client), daemon=True)
                back.start()
                _relay(client, upstream)
                back.join(timeout=5)


def _relay(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
