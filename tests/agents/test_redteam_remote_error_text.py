"""Red team (ops console, OWASP A03): a remote service's error answer is quoted into the step's failure
(``RemoteError``: ``answered HTTP 402: <the first 300 characters of its body>``), and from there into the
agent's reply, the state record's ``lastError`` and history, the log lines and the operator console, which
shows it as text. Text as a service sends it could hold what ``domain/text.py`` keeps out of every record
and log line: bidirectional overrides (the console and a log viewer show it in another order than it is
stored: "Trojan Source"), control characters (a terminal escape, a forged log line after a line break). A
service, a proxy in front of it or anyone who can shape its error body chose what the operator read. A
``RemoteError``'s message is now made carriable (``domain.text.carriable``), as every other outside text is."""

from __future__ import annotations

import pytest

from adapters.remote.http_service import HttpRemoteService
from adapters.remote.interface import RemoteError
from domain.text import uncarriable
from tests.agents.test_redteam_malformed_http_answers import CALL, raw_server  # noqa: F401

HOSTILE = "card declined \u202e0001 DNUFER\u202c\x1b[2J\r\n2026-05-01 INFO operator approved the refund\x00"


def _answer(status: str, body: str) -> bytes:
    raw = body.encode("utf-8")
    return b"HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (status.encode(), len(raw), raw)


@pytest.mark.parametrize("status", ["402 Payment Required", "503 Service Unavailable"])
def test_an_error_answers_text_reaches_the_failure_carriable(raw_server, status):  # noqa: F811
    answer, url = raw_server
    answer["raw"] = _answer(status, HOSTILE)
    with pytest.raises(RemoteError) as failed:
        HttpRemoteService(url, timeout_seconds=2).call(CALL)
    text = str(failed.value)
    assert uncarriable(text) is None, repr(text)
    assert "card declined" in text and "operator approved the refund" in text  # what it said is kept, visibly
