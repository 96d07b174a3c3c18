"""Dataclasses to and from their JSON form, driven by `dataclasses.fields()` and the field types.
`to_dict` writes nested dataclasses as objects, tuples as lists and dict keys as strings; `from_dict` reads them
back by the field types (int dict keys, tuples, nested `from_dict`), defaults for missing keys, and ignores unknown
keys unless `refuse_unknown` names what is read. A field's metadata (`options`) states any other format;
`serialized_properties` names derived properties a class writes for readers."""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, Union, get_args, get_origin, get_type_hints

from lextra.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

#: metadata keys (see `options`)
KEY, OMIT_NONE, ENCODE, DECODE, COERCE, INLINE = "key", "omit_none", "encode", "decode", "coerce", "inline"
#: the class attribute naming properties written after the fields (and not read back)
DERIVED = "serialized_properties"


def options(
    *,
    key: str | None = None,
    omit_none: bool = False,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
    coerce: bool = False,
    inline: bool = False,
) -> dict[str, Any]:
    """Field metadata for a format that differs from the default rule: `key` (the JSON key), `omit_none`, `encode` /
    `decode` (applied to a non-None value), `coerce` (scalars to the annotated int / float on reading), `inline` (merged
    into the parent's keys)."""
    meta: dict[str, Any] = {KEY: key, OMIT_NONE: omit_none, COERCE: coerce, INLINE: inline}
    if encode is not None:
        meta[ENCODE] = encode
    if decode is not None:
        meta[DECODE] = decode
    return {k: v for k, v in meta.items() if v not in (None, False)}


def rounded(digits: int) -> Callable[[Any], Any]:
    """An `encode` that rounds a number to `digits` decimals."""
    return functools.partial(round, ndigits=digits)


def json_key(f: Field[Any]) -> str:
    return f.metadata.get(KEY, f.name)


def encode(value: Any) -> Any:
    """A value in its JSON form: dataclasses as objects, mappings with string keys, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        method = getattr(value, "to_dict", None)
        return method() if callable(method) else to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def to_dict(obj: Any) -> dict[str, Any]:
    """The JSON form of a dataclass instance: its fields in order, then its `serialized_properties`."""
    if not is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"to_dict needs a dataclass instance, got {type(obj).__name__}")
    data: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        meta = f.metadata
        if value is None and meta.get(OMIT_NONE):
            continue
        written = meta[ENCODE](value) if ENCODE in meta and value is not None else encode(value)
        if meta.get(INLINE):
            data.update(written)
        else:
            data[json_key(f)] = written
    for name in getattr(type(obj), DERIVED, ()):
        data[name] = encode(getattr(obj, name))
    return data


def check_fields(cls: type, data: Mapping[str, Any], what: str) -> None:
    """Reject keys a config dataclass does not have, naming them and the known ones."""
    known = {json_key(f) for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{what}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


class _Reader:
    """Decodes values by type; shape errors are TypeErrors naming the field, or ConfigErrors for a config."""

    def __init__(self, cls: type, what: str | None) -> None:
        self.cls, self.what = cls, what

    def fail(self, name: str, expected: str, value: Any) -> Exception:
        if self.what is not None:
            return ConfigError(f"{self.what}: {name} must be {expected}, got {value!r}")
        return TypeError(f"{self.cls.__name__}.{name}: expected {expected}, got {value!r}")

    def decode(self, tp: Any, value: Any, name: str, coerce: bool) -> Any:
        if tp is Any or tp is object:
            return value
        origin, args = get_origin(tp), get_args(tp)
        if origin is Union or origin is types.UnionType:
            if value is None and type(None) in args:
                return None
            rest = [a for a in args if a is not type(None)]
            return self.decode(rest[0], value, name, coerce) if len(rest) == 1 else value
        if isinstance(tp, type) and is_dataclass(tp):
            if not isinstance(value, Mapping):
                raise self.fail(name, "a table of fields" if self.what else "an object", value)
            method = getattr(tp, "from_dict", None)
            return method(value) if callable(method) else from_dict(tp, value)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return tp(value)
        if origin in (dict, Mapping) or tp is dict:
            if not isinstance(value, Mapping):
                raise self.fail(name, "a table" if self.what else "an object", value)
            if not args:
                return dict(value)
            key_type, value_type = args
            return {
                self.key(key_type, k): self.decode(value_type, v, f"{name}[{k!r}]", coerce) for k, v in value.items()
            }
        if origin in (list, tuple) or tp in (list, tuple):
            if not isinstance(value, (list, tuple)):
                raise self.fail(name, "a list", value)
            if origin is tuple and args and args[-1] is not Ellipsis:
                if len(args) != len(value):
                    raise self.fail(name, f"a list of {len(args)} values", value)
                return tuple(self.decode(a, v, name, coerce) for a, v in zip(args, value, strict=True))
            item = args[0] if args else Any
            items = [self.decode(item, v, f"{name}[{i}]", coerce) for i, v in enumerate(value)]
            return tuple(items) if (origin is tuple or tp is tuple) else items
        if coerce and tp in (int, float) and value is not None and not isinstance(value, bool):
            return tp(value)
        return value

    @staticmethod
    def key(tp: Any, key: str) -> Any:
        return int(key) if tp is int else float(key) if tp is float else key


def from_dict(cls: type[T], data: Mapping[str, Any], *, refuse_unknown: str | None = None) -> T:
    """An instance of dataclass `cls` read from its JSON form; with `refuse_unknown` (what is read) unknown keys and
    values of the wrong shape are a ConfigError."""
    if not isinstance(data, Mapping):
        what = refuse_unknown or cls.__name__
        raise (ConfigError if refuse_unknown else TypeError)(f"{what}: expected a table of fields, got {data!r}")
    if refuse_unknown is not None:
        check_fields(cls, data, refuse_unknown)
    reader = _Reader(cls, refuse_unknown)
    dataclass_type: type = cls  # the cache keys on the class; mypy cannot prove an arbitrary type[T] hashable
    hints = _hints(dataclass_type)
    all_fields = [f for f in fields(cls) if f.init]
    claimed = {json_key(f) for f in all_fields if not f.metadata.get(INLINE)}
    values: dict[str, Any] = {}
    for f in all_fields:
        meta = f.metadata
        if meta.get(INLINE):
            raw: Any = {k: v for k, v in data.items() if k not in claimed}
        elif json_key(f) in data:
            raw = data[json_key(f)]
        elif f.default is not MISSING or f.default_factory is not MISSING:
            continue
        else:
            raise KeyError(json_key(f))
        if DECODE in meta:
            values[f.name] = None if raw is None else meta[DECODE](raw)
        else:
            values[f.name] = reader.decode(hints[f.name], raw, f.name, bool(meta.get(COERCE)))
    return cls(**values)


class Serializable:
    """A dataclass base giving `to_dict` / `from_dict` by the rules above (unknown keys ignored)."""

    if TYPE_CHECKING:  # every subclass is a dataclass
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return from_dict(cls, data)
