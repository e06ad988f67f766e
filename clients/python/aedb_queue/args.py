"""Checks of the caller's arguments, each error naming the argument.

The extension checks everything again (and is the authority); these checks
turn the common mistakes into a Python exception before a round trip, with
a message that names the argument as the caller spelled it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

MAX_NAME_BYTES = 128

Seconds = int | float | timedelta
"""A duration read here: a number of seconds or a timedelta."""

Duration = int | float | timedelta | str
"""A duration: a number of seconds, a timedelta, or a str written as in SQL
('30 seconds', '1h30m', '500ms', '2 days', 'PT1H'; a bare number is seconds)
that PostgreSQL's interval input reads, never a parser of this package."""

# What a bad duration's error says after PostgreSQL's reason.
HOW = ("write a duration as in SQL: '90 seconds', '1 hour', '1h30m', '500ms', '2 days', "
       "or a number of seconds")

# A duration's text read by the server: the seconds of its interval.
INTERVAL_SECONDS = "SELECT extract(epoch FROM %s::text::interval)::float8"


def queue_name(value: Any, arg: str = "queue") -> str:
    if not isinstance(value, str):
        raise TypeError(f"{arg}: expected a str, got {type(value).__name__}")
    size = len(value.encode("utf-8"))
    if size == 0:
        raise ValueError(f"{arg}: must not be empty")
    if size > MAX_NAME_BYTES:
        raise ValueError(f"{arg}: at most {MAX_NAME_BYTES} bytes, got {size}")
    return value


def duration(
    value: Any, arg: str, *, positive: bool = False, optional: bool = True
) -> timedelta | None:
    """A number of seconds or a timedelta, as a timedelta (None stays None)."""
    if value is None:
        if optional:
            return None
        raise TypeError(f"{arg}: required, got None")
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise TypeError(
            f"{arg}: expected seconds (int or float) or a timedelta, "
            f"got {type(value).__name__}"
        )
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"{arg}: must be finite, got {value!r}")
    if positive and seconds <= 0:
        raise ValueError(f"{arg}: must be positive, got {value!r}")
    if seconds < 0:
        raise ValueError(f"{arg}: must not be negative, got {value!r}")
    return value if isinstance(value, timedelta) else timedelta(seconds=seconds)


def seconds(value: Any, arg: str, *, positive: bool = True) -> float:
    """A required duration, as float seconds."""
    d = duration(value, arg, positive=positive, optional=False)
    assert d is not None
    return d.total_seconds()


def duration_or_text(
    value: Any, arg: str, *, positive: bool = False, optional: bool = True
) -> timedelta | str | None:
    """As :func:`duration`, and a str is kept as it is for PostgreSQL's
    interval input to read (after :func:`check_read` its seconds are checked)."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{arg}: must not be empty ({HOW})")
        return value
    try:
        return duration(value, arg, positive=positive, optional=optional)
    except TypeError:
        if value is None:
            raise
        raise TypeError(
            f"{arg}: expected seconds (int or float), a timedelta or a str such as '30 seconds', "
            f"got {type(value).__name__}"
        ) from None


def seconds_or_text(value: Any, arg: str, *, positive: bool = True) -> float | str:
    """A required duration: float seconds, or a str for the server to read."""
    d = duration_or_text(value, arg, positive=positive, optional=False)
    assert d is not None
    return d if isinstance(d, str) else d.total_seconds()


def check_read(seconds: float, value: Any, arg: str, *, positive: bool) -> float:
    """``seconds``, what the server read ``value`` (a str) as, within the sign
    ``duration`` would check."""
    if not math.isfinite(seconds):
        raise ValueError(f"{arg}: must be finite, got {value!r}")
    if positive and seconds <= 0:
        raise ValueError(f"{arg}: must be positive, got {value!r} ({seconds:g} s)")
    if seconds < 0:
        raise ValueError(f"{arg}: must not be negative, got {value!r} ({seconds:g} s)")
    return seconds


def bad_text(arg: str, value: str, reason: str) -> ValueError:
    """The error of a duration text the server's interval input refused."""
    return ValueError(f"{arg}: {value!r} is not a duration PostgreSQL reads ({reason}); {HOW}")


def integer(
    value: Any, arg: str, *, minimum: int | None = None, optional: bool = True
) -> int | None:
    if value is None:
        if optional:
            return None
        raise TypeError(f"{arg}: required, got None")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg}: expected an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{arg}: must be at least {minimum}, got {value}")
    return value


def text(value: Any, arg: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{arg}: expected a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{arg}: must not be empty")
    return value


def task_ids(value: Any, arg: str = "wait_for") -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{arg}: expected a sequence of task ids, got {type(value).__name__}")
    ids = list(value)
    for i, item in enumerate(ids):
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"{arg}[{i}]: expected an int task id, got {type(item).__name__}")
    return ids


PARENT_FAILURE = ("dead_letter", "run")


def on_parent_failure(value: Any) -> str:
    if value is None:
        return "dead_letter"
    if not isinstance(value, str) or value not in PARENT_FAILURE:
        raise ValueError(f"on_parent_failure: one of {PARENT_FAILURE}, got {value!r}")
    return value


def flow_keys(concurrency_key: Any, ordering_key: Any,
              fairness_key: Any) -> tuple[str | None, str | None, str | None]:
    keys = (
        text(concurrency_key, "concurrency_key"),
        text(ordering_key, "ordering_key"),
        text(fairness_key, "fairness_key"),
    )
    if keys[0] is not None and keys[1] is not None:
        raise ValueError("concurrency_key, ordering_key: give one or the other, not both")
    return keys
