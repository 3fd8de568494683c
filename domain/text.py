"""Text every record, message and log line can carry. Pure.

JSON may escape a lone surrogate (``"\\udc80"``), and ``json.loads`` returns it in a ``str``; no
UTF-8 encoder takes it (pydantic refuses it in a contract, a Service Bus body cannot hold it).
Control characters forge lines in logs and consoles; bidirectional formatting characters (U+202A-U+202E,
U+2066-U+2069: embeddings, overrides, isolates) make a console or a log viewer show text in another
order than it is stored ("Trojan Source"). Text from outside (an operator's reason, a client's address)
is refused when it holds any of them (``uncarriable``), or when nothing visible is left of it
(``blank``: whitespace, format characters such as U+200B or U+FEFF, Hangul fillers, the blank Braille cell);
text on its way out (an alert's summary, a status's reason, an operator's name from the platform, a remote service's
answer quoted in a failure, ``RemoteError``; a record written before that rule) is made carriable (``carriable``)."""

from __future__ import annotations

import re
import unicodedata

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 control characters, DEL; and the Unicode line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_LINE_BREAKS = re.compile("[\t\n\r\u2028\u2029]+")
# The marks (U+200E, U+200F, U+061C) stay: right-to-left text uses them, and they reorder nothing.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
# Characters that show nothing and are not whitespace (``str.strip`` keeps them): Unicode's
# Default_Ignorable_Code_Point (DerivedCoreProperties.txt, assigned or not: the Hangul fillers, the Khmer
# inherent vowels, variation selectors, U+FFF0-U+FFF8, the tags block...); with every other format
# character (category Cf), checked by category; and BRAILLE PATTERN BLANK (U+2800, category So: a cell with no
# dots, drawn as nothing, the usual way to pass a "not blank" check with text that shows nothing).
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u2800"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]"
)


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (no UTF-8 encoder takes it)."""
    return _SURROGATE.search(text) is not None


def uncarriable(text: str) -> str | None:
    """Why ``text`` cannot be carried as it is (tabs and line breaks aside: ``one_line`` folds them),
    or None."""
    if has_lone_surrogate(text):
        return "it is not Unicode text (a lone surrogate)"
    if _CONTROL.search(_LINE_BREAKS.sub(" ", text)):
        return "it holds control characters"
    if _BIDI.search(text):
        return "it holds bidirectional formatting characters"
    return None


def blank(text: str) -> bool:
    """Whether nothing visible is left of ``text`` once whitespace and invisible characters are gone."""
    return all(char.isspace() or _INVISIBLE.match(char) or unicodedata.category(char) == "Cf" for char in text)


def has_line_break(text: str) -> bool:
    """Whether ``text`` holds a tab or a line break (what ``one_line`` folds): an identifier holds none."""
    return _LINE_BREAKS.search(text) is not None


def one_line(text: str) -> str:
    """``text`` with each run of tabs and line breaks folded to one space, trimmed."""
    return _LINE_BREAKS.sub(" ", text).strip()


def carriable(text: str) -> str:
    """``text`` as every contract and log line can carry it: a lone surrogate becomes U+FFFD, a
    control character or line break a space, a bidirectional formatting character is dropped."""
    return _BIDI.sub("", _CONTROL.sub(" ", _SURROGATE.sub("\ufffd", text)))
