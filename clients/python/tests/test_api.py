"""The pure-Python parts: follow-up specs, payload codecs, argument errors (no database)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum

import pytest

from aedb_queue import Complete, FollowUp, PayloadError, Retry
from aedb_queue.payloads import decode, dumps


def test_follow_up_spec_is_what_queue_complete_reads():
    spec = FollowUp("audit", {"order": 1}, delay=dt.timedelta(minutes=5), priority=2,
                    max_attempts=3, backoff_base=0.25, idempotency_key="a-1", wait_for=[4, 5]).spec()
    assert spec == {"queue": "audit", "payload": {"order": 1}, "delay": 300, "priority": 2,
                    "max_attempts": 3, "backoff_base": 0.25, "idempotency_key": "a-1", "wait_for": [4, 5]}
    assert FollowUp("next").spec() == {"queue": "next"}


@pytest.mark.parametrize("kwargs, error, name", [
    ({"queue": ""}, ValueError, "FollowUp.queue"),
    ({"delay": -5}, ValueError, "FollowUp.delay"),
    ({"max_attempts": 0}, ValueError, "FollowUp.max_attempts"),
    ({"priority": "high"}, TypeError, "FollowUp.priority"),
    ({"wait_for": ["x"]}, TypeError, "FollowUp.wait_for[0]"),
])
def test_follow_up_errors_name_the_field(kwargs, error, name):
    with pytest.raises(error, match="^" + name.replace("[", r"\[")):
        FollowUp(**{"queue": "q", **kwargs})


def test_complete_wants_follow_ups():
    with pytest.raises(TypeError, match=r"^follow_ups\[0\]"):
        Complete(result=1, follow_ups=[{"queue": "q"}])


def test_retry_delay():
    assert Retry(in_=1.5).in_ == dt.timedelta(seconds=1.5)
    assert Retry().in_ == dt.timedelta(0)
    with pytest.raises(TypeError, match="^in_"):
        Retry(in_="soon")


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: float
    y: float
    color: Color = Color.RED
    at: dt.date | None = None


@dataclasses.dataclass
class Shape:
    points: list[Point]
    labels: dict[str, int]


def test_round_trip_through_json():
    import json

    shape = Shape([Point(1, 2.5, at=dt.date(2026, 1, 2)), Point(0, 0)], {"a": 1})
    data = json.loads(dumps(shape))
    assert data == {"points": [{"x": 1, "y": 2.5, "color": "red", "at": "2026-01-02"},
                               {"x": 0, "y": 0, "color": "red", "at": None}], "labels": {"a": 1}}
    back = decode(Shape, data)
    assert back == shape and isinstance(back.points[0].x, float)


@pytest.mark.parametrize("data, fragment", [
    ({"points": [{"x": 1}], "labels": {}}, "missing"),
    ({"points": [{"x": "one", "y": 1}], "labels": {}}, "payload.points[0].x"),
    ({"points": {}, "labels": {}}, "payload.points: expected a JSON array"),
    ({"points": [], "labels": {}, "extra": 1}, "unknown field(s) for Shape: extra"),
    ([1, 2], "expected a JSON object"),
])
def test_decode_errors_say_where(data, fragment):
    with pytest.raises(PayloadError, match="^payload does not decode as Shape") as info:
        decode(Shape, data)
    assert fragment in str(info.value)
