"""Blank means nothing visible (domain/text.py ``blank``): Unicode's Default_Ignorable_Code_Point set, which
renderers show as nothing (DerivedCoreProperties.txt), counts as invisible, including members outside
category Cf: KHMER VOWEL INHERENT AQ/AA (U+17B4, U+17B5, category Mn) and the reserved default-ignorables
U+2065, U+FFF0-U+FFF8, U+E0080-U+E00FF, U+E01F0-U+E0FFF (category Cn); and the blank Braille cell U+2800
(category So, drawn as nothing: the red team of the operator API passed a reason made only of it). A
customerId, shipTo, operator reason or operator name made only of them is refused or skipped; real text in
other scripts, emoji sequences and combining marks are still taken. An operator's name cut at its limit keeps
whole flags."""

from __future__ import annotations

import json

import pytest

from contracts.parsing import InvalidMessage, parse
from domain.text import blank
from operations.web import ActionBody, parse_action_body
from tests.contracts.test_client_text import ACCEPTED
from tests.submission.corpus import order

STILL_INVISIBLE = {
    "khmer vowel inherent aq+aa (Mn, default ignorable)": "\u17b4\u17b5",
    "reserved default ignorable U+2065 (Cn)": "\u2065",
    "reserved default ignorable U+FFF0 (Cn)": "\ufff0\ufff1",
    "reserved default ignorable tag-block U+E0080 (Cn)": "\U000e0080\U000e0081",
    "braille pattern blank U+2800 (So, not default ignorable; drawn as nothing)": "\u2800 \u2800",
}


@pytest.mark.parametrize("case", sorted(STILL_INVISIBLE))
def test_default_ignorable_only_text_is_blank(case: str) -> None:
    assert blank(STILL_INVISIBLE[case]), f"{case}: counted as visible"


@pytest.mark.parametrize("case", sorted(STILL_INVISIBLE))
def test_default_ignorable_only_customer_id_is_refused(case: str) -> None:
    with pytest.raises(InvalidMessage):
        parse(json.dumps(order(customerId=STILL_INVISIBLE[case])).encode(), ACCEPTED)


@pytest.mark.parametrize("case", sorted(STILL_INVISIBLE))
def test_default_ignorable_only_operator_reason_is_400(case: str) -> None:
    answer = parse_action_body(json.dumps({"reason": STILL_INVISIBLE[case] * 3}).encode(), review=False)
    assert not isinstance(answer, ActionBody), f"{case}: taken as the reason {answer!r}"


LEGIT = {
    "arabic name": "\u0645\u062d\u0645\u062f \u0628\u0646 \u0633\u0644\u0645\u0627\u0646",
    "persian with ZWNJ": "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
    "family ZWJ emoji": "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "flag": "\U0001f1ef\U0001f1f5",
    "england subdivision flag (tags)": "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
    "heart with VS16": "\u2764\ufe0f",
    "keycap": "1\ufe0f\u20e3",
    "combining acute": "Jose\u0301",
    "skin tone": "\U0001f44d\U0001f3fd",
    "arabic with RLM": "\u200f\u0634\u0627\u0631\u0639 5",
    "braille text beside a blank cell": "\u2813\u2811\u2807\u2807\u2815\u2800\u283a",
}


@pytest.mark.parametrize("case", sorted(LEGIT))
def test_legit_text_still_accepted(case: str) -> None:  # passes: recorded as what held
    parse(json.dumps(order(shipTo=LEGIT[case], customerId=LEGIT[case])).encode(), ACCEPTED)


@pytest.mark.parametrize("case", sorted(STILL_INVISIBLE))
def test_an_invisible_operator_name_claim_is_skipped(case: str) -> None:
    from operations.auth import operator_name

    assert operator_name(STILL_INVISIBLE[case]) == "", f"{case}: an invisible name goes on history[].by"


def test_operator_name_cut_does_not_split_a_flag() -> None:
    """Low: the 128-character cut is by code point; a flag (two regional indicators) or a ZWJ sequence at
    the cut is split, and a lone regional indicator shows as a different symbol on the record."""
    from operations.auth import MAX_OPERATOR_NAME, operator_name

    name = operator_name("a" * (MAX_OPERATOR_NAME - 2) + "\U0001f1ef\U0001f1f5 tail")
    kept = name.rstrip("\u2026")
    assert not kept.endswith("\U0001f1ef"), f"half a flag kept: {name[-4:]!r}"
