"""Configuration from plain dicts and YAML: :func:`from_dict` (unknown keys and bad values named by their
key path), :func:`to_dict`, :func:`load_yaml`, :func:`load_config` (a file, then ``KEY=VALUE`` overrides)."""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Mapping, TypeVar

from ..options import PhraseSpec, parse_phrases
from .checks import _fail, ConfigError


T = TypeVar("T")


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp == tuple[PhraseSpec, ...]:  # a list of phrases, or one comma-separated string of them
        return parse_phrases(value, path)
    if tp is PhraseSpec and isinstance(value, str):
        value = {"phrase": value}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            _fail(path, f"expected a mapping, got {type(value).__name__}")
        return from_dict(tp, value, path)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            _fail(path, f"expected a list, got {type(value).__name__}")
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict) or tp in (dict,):
        if not isinstance(value, Mapping):
            _fail(path, f"expected a mapping, got {type(value).__name__}")
        args = typing.get_args(tp)
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _convert(vt, v, f"{path}.{k}") for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, path)
            except ConfigError:
                continue
        _fail(path, f"bad value {value!r}")
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            _fail(path, f"expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(path, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            _fail(path, f"expected a string, got {value!r}")
        return value
    return value


def from_dict(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Build dataclass ``cls`` from a nested mapping, rejecting unknown keys.

    Errors are :class:`ConfigError` with the full dotted key path.
    """
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        _fail(where, f"unknown key (known: {', '.join(sorted(names))})")
    kwargs = {k: _convert(hints[k], v, f"{path}.{k}" if path else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if path:
            raise ConfigError(f"{path}.{e}") from None
        raise


def to_dict(obj: Any) -> Any:
    """Plain nested dict/list form of a config dataclass (YAML/JSON-safe)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def _read_yaml_mapping(path: str | Path) -> dict:
    """The top-level mapping of a YAML file (an empty file: {}); ConfigError when it is not a mapping."""
    import yaml

    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, Mapping):
        _fail("", f"{path}: top level must be a mapping, got {type(data).__name__}")
    return dict(data)


def load_yaml(path: str | Path, cls: type[T], section: str | None = None) -> T:
    """Load a YAML file (optionally one top-level ``section``) into ``cls``."""
    data = _read_yaml_mapping(path)
    if section is not None:
        data = data.get(section) or {}
    return from_dict(cls, data, section or "")


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for i, p in enumerate(parts[:-1]):
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            _fail(".".join(parts[:i + 1]), f"is not a mapping, cannot set {key}")
        node = nxt
    node[parts[-1]] = value


def load_config(cls: type[T], path: str | Path | None = None, overrides: typing.Sequence[str] = (),
                example: str = "", values: Mapping[str, Any] | None = None) -> T:
    """``cls`` from a YAML file (None: the defaults), then ``KEY=VALUE`` overrides (dotted keys, YAML values;
    ``example`` shows one in the error for a malformed item), then ``values`` (top-level keys the caller sets,
    e.g. from a command-line flag).  Unknown keys and bad values raise :class:`ConfigError` naming the key."""
    import yaml

    data = _read_yaml_mapping(path) if path is not None else {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            _fail("", f"override {item!r}: expected KEY=VALUE" + (f", e.g. {example}" if example else ""))
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    data.update(values or {})
    return from_dict(cls, data)
