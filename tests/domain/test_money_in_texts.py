"""Amounts in the texts operators read (history details, dead-letter descriptions, alerts) are written in the
currency's units, not as a count of cents labelled with the currency ("(158208 EUR)" for 1,582.08 EUR)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.payments import decide_payment, money, received, with_payment
from tests.deferral.test_rules import ORDER, note, record

NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cents", "text"), [(158208, "1582.08 EUR"), (2500, "25.00 EUR"), (5, "0.05 EUR"), (0, "0.00 EUR")]
)
def test_money_writes_hundredths_as_the_currency_s_units(cents, text):
    assert money(cents, "EUR") == text


def test_an_applied_payment_says_its_amount_in_the_currency_s_units():
    paid = with_payment(record(), received(note(amount_cents=158208), 4, NOW), NOW)
    assert paid.history[-1].detail == "n-1 (1582.08 EUR)"


def test_a_mismatched_and_a_second_payment_say_their_amounts_in_the_currency_s_units():
    mismatch = decide_payment(record(), ORDER, note(amount_cents=2499))
    assert "says 24.99 EUR" in mismatch.description and "totals 25.00 EUR" in mismatch.description
    paid = with_payment(record(), received(note(), 4, NOW), NOW)
    second = decide_payment(paid, ORDER, note(notification_id="n-2"))
    assert "n-2 (25.00 EUR) is a second payment" in second.description
