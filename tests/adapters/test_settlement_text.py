"""``dead_letter_text``: what a dead-letter reason and description may carry (Service Bus takes UTF-8 text;
a console takes no control characters), for every trigger's settlement and for deferred messages alike."""

from __future__ import annotations

from adapters.servicebus.settlement import Settlement, dead_letter_text


def test_a_lone_surrogate_and_control_characters_become_carriable_and_the_description_is_cut() -> None:
    reason, description = dead_letter_text("Odd\udc80", "field '\udc80\x1b[2J'\r\nFAKE: refunded " + "x" * 2000)
    assert reason == "Odd\ufffd"
    assert description.startswith("field '\ufffd [2J'  FAKE")
    assert len(description) == 1024
    description.encode("utf-8")  # no lone surrogate left


def test_every_dead_letter_settlement_goes_through_it() -> None:
    settled = Settlement.deadletter("InvalidFields", "name \udc80\x00")
    assert (settled.reason, settled.description) == ("InvalidFields", "name \ufffd ")
