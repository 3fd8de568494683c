"""Text from outside must show what it stores (domain/text.py ``uncarriable``, ``blank``): a client's
``customerId``/``shipTo`` (contracts/messages.py ``ClientText``) and an operator's reason
(operations/web.py ``parse_action_body``).

* Blank is "nothing visible": ``str.strip`` keeps ZERO WIDTH SPACE (U+200B), the BOM (U+FEFF), WORD
  JOINER (U+2060), HANGUL FILLER (U+3164), so a value made of them was taken as text nobody can see.
* Bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) make the console and
  log viewers show text in another order than it is stored ("Trojan Source"): refused, like control
  characters. The marks right-to-left text uses (U+200E, U+200F) are kept.
* ``prepaid`` is strict, as amounts are: it decides whether the order is charged or waits for a
  provider's notification, so ``"true"``, ``"yes"`` or ``1`` is refused, not read as true."""

from __future__ import annotations

import json

import pytest

from contracts.messages import OrderSubmitted
from contracts.parsing import InvalidMessage, parse
from operations.web import ActionBody, parse_action_body
from tests.contracts.test_client_text import ACCEPTED
from tests.submission.corpus import order

INVISIBLE = {
    "zero width space": "\u200b",
    "BOM": "\ufeff",
    "word joiner": "\u2060",
    "hangul filler": "\u3164",
}
BIDI = {
    "right-to-left override": "refund \u202eten\u202c approved",
    "right-to-left isolate": "ship to \u2067evil\u2069 street",
}


@pytest.mark.parametrize("case", sorted(INVISIBLE))
def test_an_invisible_only_customer_id_is_blank(case):
    with pytest.raises(InvalidMessage):
        parse(json.dumps(order(customerId=INVISIBLE[case])).encode(), ACCEPTED)


@pytest.mark.parametrize("case", sorted(INVISIBLE))
def test_an_invisible_only_operator_reason_is_400(case):
    answer = parse_action_body(json.dumps({"reason": INVISIBLE[case] * 3}).encode(), review=False)
    assert not isinstance(answer, ActionBody), f"{case}: taken as the reason {answer!r}"


@pytest.mark.parametrize("case", sorted(BIDI))
def test_bidi_controls_in_a_client_or_operator_text_are_refused(case):
    with pytest.raises(InvalidMessage):
        parse(json.dumps(order(shipTo=BIDI[case])).encode(), ACCEPTED)
    answer = parse_action_body(json.dumps({"reason": BIDI[case]}).encode(), review=False)
    assert not isinstance(answer, ActionBody), f"{case}: taken as the reason {answer!r}"


@pytest.mark.parametrize("value", ["true", "yes", "on", 1])
def test_prepaid_as_a_string_or_number_is_refused_like_an_amount_as_a_string(value):
    with pytest.raises(InvalidMessage):
        parse(json.dumps(order(prepaid=value)).encode(), ACCEPTED)


def test_right_to_left_text_with_its_marks_is_accepted():
    hebrew = "\u05e8\u05d7\u05d5\u05d1 \u05d4\u05e8\u05e6\u05dc 12\u200f, \u05ea\u05dc \u05d0\u05d1\u05d9\u05d1"
    parsed = parse(json.dumps(order(shipTo=hebrew)).encode(), ACCEPTED)
    assert isinstance(parsed, OrderSubmitted) and parsed.ship_to == hebrew
    answer = parse_action_body(
        json.dumps({"reason": "\u05dc\u05e7\u05d5\u05d7 \u05d1\u05d9\u05e7\u05e9\u200f"}).encode(), review=False
    )
    assert isinstance(answer, ActionBody)


def test_prepaid_as_a_json_boolean_is_taken():
    parsed = parse(json.dumps(order(prepaid=True)).encode(), ACCEPTED)
    assert isinstance(parsed, OrderSubmitted) and parsed.prepaid is True
