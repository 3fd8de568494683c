"""``domain.ncrontab``: what each field of an expression fires on, and the longest wait between two
firings (what the settings check ``SUPERVISOR_SCHEDULE`` against)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.ncrontab import NcrontabExpression, parse_field


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("*", set(range(60))),
        ("*/15", {0, 15, 30, 45}),
        ("7", {7}),
        ("5-8", {5, 6, 7, 8}),
        ("1,3,59", {1, 3, 59}),
        ("0-50/10", {0, 10, 20, 30, 40, 50}),
        ("50/5", {50, 55}),  # from 50 to the end of the field
        ("0,15-45/15", {0, 15, 30, 45}),
        ("*/60", {0}),
    ],
)
def test_a_field_fires_on_the_values_it_names(text: str, values: set[int]) -> None:
    assert parse_field(text, 0, 59) == values


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x",
        "+5",
        "5_0",  # Python's int() would take it
        "٣",  # a digit, but not 0-9
        "1,,2",
        "*/0",
        "*/",
        "/5",
        "1-",
        "5-1",
        "60",
        "0-60",
        "MON",
    ],
)
def test_a_field_it_cannot_read_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_field(bad, 0, 59)


@pytest.mark.parametrize("bad", ["* * * * *", "* * * * * * *", "0 0 * * * 7", "0 0 * * * MON", "0 0 * * JAN *"])
def test_an_expression_needs_six_fields_within_their_bounds(bad: str) -> None:
    with pytest.raises(ValueError):
        NcrontabExpression.parse(bad)


@pytest.mark.parametrize(
    ("expression", "gap"),
    [
        ("*/30 * * * * *", timedelta(seconds=30)),
        ("0,30 * * * * *", timedelta(seconds=30)),
        ("* * * * * *", timedelta(seconds=1)),
        ("0 */5 * * * *", timedelta(minutes=5)),
        ("0 */10 * * * *", timedelta(minutes=10)),
        ("0 */15 * * * *", timedelta(minutes=15)),
        ("0 0 * * * *", timedelta(hours=1)),
        ("0 0-50/10 * * * *", timedelta(minutes=10)),  # :00 is in the range: */10 by another name
        ("0 10-50/10 * * * *", timedelta(minutes=20)),  # :50 to the next hour's :10
        ("0 7,8 * * * *", timedelta(minutes=59)),  # :08 to the next hour's :07
        ("30 9 * * * *", timedelta(hours=1)),
        ("0 5-55/10 * * * *", timedelta(minutes=10)),  # :55 to :05 across the hour
        ("0 */5 */1 * * *", timedelta(minutes=5)),
        ("0 */5 0-23 1-31 1-12 0-6", timedelta(minutes=5)),
        ("0 */5 0-11,12-23 * * 0,1,2,3,4,5,6", timedelta(minutes=5)),  # lists that cover every value
    ],
)
def test_the_longest_gap_of_a_schedule_that_fires_every_hour_alike(expression: str, gap: timedelta) -> None:
    schedule = NcrontabExpression.parse(expression)
    assert schedule.every_hour()
    assert schedule.longest_gap() == gap


@pytest.mark.parametrize(
    "expression",
    [
        "0 */5 9-17 * * *",
        "0 */5 0-22 * * *",
        "0 */5 * * * 1-5",
        "0 */5 * 1-30 * *",
        "0 */5 * * 1-11 *",
        "0 */5 */2 * * *",
    ],
)
def test_a_schedule_that_leaves_some_hour_out_has_no_gap_within_the_hour(expression: str) -> None:
    schedule = NcrontabExpression.parse(expression)
    assert not schedule.every_hour()
    assert schedule.longest_gap() is None
