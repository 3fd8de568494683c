"""Broker contract: Service Bus limits refused at send (``localrun/servicebus/limits.py`` has the
sources: the SDK's ``MESSAGE_PROPERTY_MAX_LENGTH`` check on ``message_id``, and the quotas page:
256 KB per message on Standard, 32 KB per property, 64 KB for the whole header)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adapters.clock import ManualClock
from adapters.servicebus.sender import MessageRejected, OutgoingMessage, SendError
from localrun.servicebus import InProcessBroker

START = datetime(2026, 1, 1, tzinfo=UTC)


def broker() -> InProcessBroker:
    b = InProcessBroker(ManualClock(START))
    b.declare_queue("q")
    return b


def test_a_message_id_of_128_characters_is_accepted_and_129_is_refused_with_the_sdks_message() -> None:
    b = broker()
    b.send("q", OutgoingMessage(body="{}", message_id="m" * 128))
    with pytest.raises(MessageRejected, match="message_id cannot be longer than 128 characters"):
        b.send("q", OutgoingMessage(body="{}", message_id="m" * 129))
    assert b.counters("q").sent == 1
    assert b.counters("q").limit_violations == 1


def test_a_message_over_256_kb_is_refused_and_nothing_is_stored() -> None:
    b = broker()
    b.send("q", OutgoingMessage(body="x" * (250 * 1024), message_id="fits"))
    with pytest.raises(MessageRejected, match="larger than the service bus frame size"):
        b.send("q", OutgoingMessage(body="x" * (256 * 1024), message_id="too-big"))
    assert [m.message_id for m in b.peek("q", 10)] == ["fits"]


def test_a_property_over_32_kb_or_a_header_over_64_kb_is_refused() -> None:
    b = broker()
    with pytest.raises(MessageRejected, match="property 'p'"):
        b.send("q", OutgoingMessage(body="{}", message_id="a", application_properties={"p": "v" * 33_000}))
    many = {f"p{i}": "v" * 20_000 for i in range(4)}  # each fits, together they do not
    with pytest.raises(MessageRejected, match="header"):
        b.send("q", OutgoingMessage(body="{}", message_id="b", application_properties=many))
    assert b.counters("q").sent == 0


def test_a_refusal_is_a_send_error_the_app_can_catch_never_a_bare_value_error() -> None:
    b = broker()
    with pytest.raises(SendError):
        b.send("q", OutgoingMessage(body="{}", message_id="m" * 300))


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**40])
def test_an_integer_property_outside_32_bits_is_refused_as_the_sdks_encoder_refuses_it(value: int) -> None:
    """azure-servicebus 7.15 (pyamqp) encodes an ``int`` application property as an AMQP int (32 bits) and
    fails the send for any other value ("Value supplied for int invalid", Azure/azure-sdk-for-python#34717;
    ``localrun/servicebus/limits.py``): a sequence number past 2**31 - 1 cannot be sent as an ``int``."""
    b = broker()
    with pytest.raises(MessageRejected, match="32 bits"):
        b.send("q", OutgoingMessage(body="{}", message_id="m", application_properties={"n": value}))
    b.send("q", OutgoingMessage(body="{}", message_id="m", application_properties={"n": str(value)}))
    b.send("q", OutgoingMessage(body="{}", message_id="k", application_properties={"n": 2**31 - 1, "f": 1e300}))
    # another client (.NET, Java) sends a 64-bit long: the service takes it
    b.send_from_client("q", OutgoingMessage(body="{}", message_id="c", application_properties={"n": value}))
    assert b.counters("q").sent == 3
