"""Typed payloads: Python values to JSON on the way in, back to types on the way out.

Encoding accepts what ``json`` does plus dataclass instances, pydantic
models (v2), enums, datetimes/dates/times (ISO 8601), UUIDs and Decimals
(as strings). Decoding turns the JSON a task carries into the type a
handler declared: a dataclass (recursively, through its annotated
fields), a pydantic model, or containers and optionals of those.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import types
import typing
import uuid
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb


class PayloadError(ValueError):
    """A value does not encode as JSON, or JSON does not decode as the declared type."""


def _is_pydantic_model(obj: Any) -> bool:
    return hasattr(obj, "model_dump") and hasattr(type(obj), "model_validate")


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if _is_pydantic_model(obj):
        return obj.model_dump(mode="json")
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (dt.datetime, dt.date, dt.time)):
        return obj.isoformat()
    if isinstance(obj, (uuid.UUID, Decimal)):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def dumps(value: Any, arg: str = "payload") -> str:
    """The JSON text of ``value``; a PayloadError naming ``arg`` if it has none."""
    try:
        return json.dumps(value, default=_default, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{arg}: {exc}") from None


def to_jsonb(value: Any, arg: str = "payload") -> Jsonb | None:
    """A bound jsonb parameter (None is SQL NULL)."""
    if value is None:
        return None
    text = dumps(value, arg)
    return Jsonb(text, dumps=_identity)


def _identity(text: str) -> str:
    return text


def to_json_value(value: Any, arg: str) -> Any:
    """``value`` as plain JSON data (dicts, lists, str, numbers), for nesting in a spec."""
    return json.loads(dumps(value, arg))


# -- decoding ---------------------------------------------------------------


def decode(tp: Any, data: Any) -> Any:
    """``data`` (parsed JSON) as an instance of ``tp``; PayloadError if it does not fit."""
    try:
        return _decode(tp, data, "payload")
    except (TypeError, ValueError, KeyError) as exc:  # PayloadError too
        name = getattr(tp, "__name__", repr(tp))
        raise PayloadError(f"payload does not decode as {name}: {exc}") from None


def _decode(tp: Any, data: Any, where: str) -> Any:
    if tp is None or tp is Any or tp is object:
        return data
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        members = typing.get_args(tp)
        if data is None and type(None) in members:
            return None
        errors = []
        for member in members:
            if member is type(None):
                continue
            try:
                return _decode(member, data, where)
            except (TypeError, ValueError, KeyError) as exc:
                errors.append(str(exc))
        raise PayloadError(f"{where}: fits none of {tp}: {'; '.join(errors)}")
    if origin in (list, set, frozenset, tuple) or tp in (list, set, frozenset, tuple):
        if not isinstance(data, list):
            raise PayloadError(f"{where}: expected a JSON array, got {type(data).__name__}")
        args = typing.get_args(tp)
        container = origin or tp
        if container is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(data):
                raise PayloadError(f"{where}: expected {len(args)} items, got {len(data)}")
            return tuple(_decode(a, d, f"{where}[{i}]") for i, (a, d) in enumerate(zip(args, data)))
        item = args[0] if args else Any
        return container(_decode(item, d, f"{where}[{i}]") for i, d in enumerate(data))
    if origin is dict or tp is dict:
        if not isinstance(data, dict):
            raise PayloadError(f"{where}: expected a JSON object, got {type(data).__name__}")
        args = typing.get_args(tp)
        value_type = args[1] if len(args) == 2 else Any
        return {k: _decode(value_type, v, f"{where}.{k}") for k, v in data.items()}
    if not isinstance(tp, type):
        return data
    if hasattr(tp, "model_validate"):
        return tp.model_validate(data)
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, data, where)
    if issubclass(tp, enum.Enum):
        return tp(data)
    if tp is dt.datetime:
        return dt.datetime.fromisoformat(data) if isinstance(data, str) else _wrong(tp, data, where)
    if tp is dt.date:
        return dt.date.fromisoformat(data) if isinstance(data, str) else _wrong(tp, data, where)
    if tp is uuid.UUID:
        return uuid.UUID(data) if isinstance(data, str) else _wrong(tp, data, where)
    if tp is Decimal:
        return Decimal(str(data))
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if not isinstance(data, tp):
        _wrong(tp, data, where)
    return data


def _wrong(tp: type, data: Any, where: str) -> typing.NoReturn:
    raise PayloadError(f"{where}: expected {tp.__name__}, got {type(data).__name__}")


def _decode_dataclass(tp: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise PayloadError(f"{where}: expected a JSON object for {tp.__name__}, got {type(data).__name__}")
    hints = typing.get_type_hints(tp)
    fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise PayloadError(f"{where}: unknown field(s) for {tp.__name__}: {', '.join(unknown)}")
    kwargs = {
        name: _decode(hints.get(name, Any), data[name], f"{where}.{name}")
        for name in fields
        if name in data
    }
    return tp(**kwargs)
