"""Text every record, message and log line can carry. Pure.

JSON may escape a lone surrogate (``"\\udc80"``), and ``json.loads`` returns it in a ``str``; no
UTF-8 encoder takes it (pydantic refuses it in a contract, a Service Bus body cannot hold it).
Control characters forge lines in logs and consoles. Text from outside (an operator's reason) is
refused when it holds either (``uncarriable``); text on its way out (an alert's summary, a status's
reason, from a record written before that rule) is made carriable (``carriable``)."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 control characters, DEL; and the Unicode line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_LINE_BREAKS = re.compile("[\t\n\r\u2028\u2029]+")


def uncarriable(text: str) -> str | None:
    """Why ``text`` cannot be carried as it is (tabs and line breaks aside: ``one_line`` folds them),
    or None."""
    if _SURROGATE.search(text):
        return "it is not Unicode text (a lone surrogate)"
    if _CONTROL.search(_LINE_BREAKS.sub(" ", text)):
        return "it holds control characters"
    return None


def one_line(text: str) -> str:
    """``text`` with each run of tabs and line breaks folded to one space, trimmed."""
    return _LINE_BREAKS.sub(" ", text).strip()


def carriable(text: str) -> str:
    """``text`` as every contract and log line can carry it: a lone surrogate becomes U+FFFD, a
    control character or line break a space."""
    return _CONTROL.sub(" ", _SURROGATE.sub("\ufffd", text))
