"""domain.text: what an operator's reason may hold, and text made carriable on its way out."""

from __future__ import annotations

import json

import pytest

from contracts.messages import OperatorAlert, StatusUpdate
from domain.text import carriable, one_line, uncarriable
from notifications.alerts import _short


@pytest.mark.parametrize(
    "text", ["card \udc80 blocked", "\ud83d alone", "a\x00b", "esc \x1b[31m red", "del \x7f", "c1 \x85"]
)
def test_text_no_record_or_message_can_carry_is_refused(text):
    assert uncarriable(text) is not None


@pytest.mark.parametrize("text", ["plain", "été, Straße, 注文", "emoji \U0001f600", "two\nlines\r\n\ttabbed"])
def test_ordinary_text_and_line_breaks_are_accepted(text):
    assert uncarriable(text) is None


def test_line_breaks_fold_to_one_space():
    assert one_line("  first\r\n\tsecond\u2028third  ") == "first second third"


def test_carriable_text_goes_into_every_contract():
    text = carriable("card \udc80 blocked\nforged line \x1b")
    assert text == "card \ufffd blocked forged line  "
    StatusUpdate(order_id="o-1", status="Failed", attempt=1, at="2026-03-01T12:00:00Z", reason=text).to_json()
    alert = OperatorAlert(
        alert_id="a", kind="k", severity="error", summary=_short("x \udc80"), at="2026-03-01T12:00:00Z"
    )
    assert json.loads(alert.to_json())["summary"] == "x \ufffd"
