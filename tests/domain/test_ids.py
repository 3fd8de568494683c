"""The orchestration instance ids the app builds, and the one check that recognises them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from domain import timefmt
from domain.compensation import compensation_instance_id
from domain.ids import MAX_ATTEMPT, instance_id, instance_order_id, url_instance_id

ORDER_IDS = ["o", "ord-1", "A_b-9", "9" * 64, "compensate"]


@pytest.mark.parametrize("order_id", ORDER_IDS)
@pytest.mark.parametrize("number", [1, 2, 10, 123, MAX_ATTEMPT])
def test_every_id_the_app_builds_is_recognised_as_its_orders(order_id, number):
    for built in (instance_id(order_id, number), compensation_instance_id(order_id, number)):
        assert instance_order_id(built) == order_id, built
        assert url_instance_id(built) == built  # nothing to escape in an id the app builds


@pytest.mark.parametrize(
    "instance",
    [
        "o1:1/terminate?reason=x&x=",
        "o1:1/terminate#",
        "x/../o1:1/terminate?",
        "o1:0",
        "o1:01",
        "o1:-1",
        f"o1:{MAX_ATTEMPT + 1}",
        "o1:compensate:0",
        "o1:compensate",
        "o1:review:1",
        "o1",
        "o1:1\n",
        " o1:1",
        "o1:1 ",
        "o1:1:2",
        "-o1:1",
        "a/b",
        ".",
        "..",
        "%2F",
        "+",
        "\u00e9:1",
        f"{'x' * 65}:1",
        "status:o1:Received:0",
    ],
)
def test_anything_else_is_not_an_instance_the_app_builds(instance):
    assert instance_order_id(instance) is None


def test_url_instance_id_escapes_what_would_change_the_url():
    assert url_instance_id("o1:1/terminate?reason=x&x=#") == "o1:1%2Fterminate%3Freason%3Dx%26x%3D%23"
    assert url_instance_id("%2F") == "%252F"
    assert url_instance_id("..") == "%2E%2E"
    assert url_instance_id("a~b. c") == "a%7Eb%2E%20c"


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00:00+01:00",  # before datetime.min in UTC: OverflowError inside astimezone
        "9999-12-31T23:59:59-01:00",  # after datetime.max in UTC
        "0999-12-31T23:59:59Z",  # a three-digit year: to_text would not be fixed width
        "9999-06-01T00:00:00Z",  # no room left for a deadline's arithmetic
    ],
)
def test_a_timestamp_out_of_range_is_a_value_error(text):
    with pytest.raises(ValueError, match="out of range"):
        timefmt.parse(text)


def test_the_range_ends_are_accepted_and_keep_their_fixed_width_text():
    assert timefmt.to_text(timefmt.parse("1000-01-01T00:00:00Z")) == "1000-01-01T00:00:00.000000Z"
    latest = timefmt.parse(datetime(9998, 12, 31, 23, 0, tzinfo=timezone(-timedelta(minutes=59))))
    assert latest == timefmt.LATEST.replace(second=0, microsecond=0, minute=59) and latest.tzinfo is UTC
