"""Command-line flags generated from a config dataclass's fields (type from the annotation, help from the field's
`#:` comment, default shown from the dataclass), and the `--config FILE` and `--set KEY=VALUE` they override. Every
generated flag's own default is None, so a flag left out keeps the file's value, else the dataclass's."""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from lextra.errors import ConfigError


def config_default(cls: type, name: str) -> Any:
    """The default of field `name` of dataclass `cls` (its `default_factory()` when it has one)."""
    for item in dataclasses.fields(cls):
        if item.name == name:
            if item.default is not dataclasses.MISSING:
                return item.default
            if item.default_factory is not dataclasses.MISSING:
                return item.default_factory()
            break
    raise KeyError(f"{cls.__name__} has no field {name!r} with a default")


def _scalar(annotation: Any) -> Any:
    """`int | None` -> int; other annotations unchanged."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kinds[0] if len(kinds) == 1 else annotation
    return annotation


def add_field_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    names: Iterable[str],
    types: Mapping[type, Callable[[str], Any]],
    *,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    more: Mapping[str, str] | None = None,
) -> None:
    """`--NAME` for each of `names` (fields of dataclass `cls`): help from the field's doc (then `more[name]`),
    type `types[annotation]` (`lextra.cli.options.FIELD_TYPES`); `options[name]` adds or replaces argparse
    settings (a stricter `type`, `choices`, `metavar`); default None (a bool: `--NAME/--no-NAME`)."""
    from lextra.train import field_docs

    hints, docs = typing.get_type_hints(cls), field_docs(cls)
    for name in names:
        kind = _scalar(hints[name])
        default = config_default(cls, name)
        text = f"{docs[name]}{(more or {}).get(name, '')} (default: {default})".replace("%", "%%")
        settings: dict[str, Any] = {"default": None, "help": text}
        if kind is bool:
            settings["action"] = argparse.BooleanOptionalAction
        else:
            settings["type"] = types[kind]
        parser.add_argument("--" + name.replace("_", "-"), **(settings | dict((options or {}).get(name, {}))))


def add_config_file(parser: argparse.ArgumentParser, what: str) -> None:
    """--config FILE and --set KEY=VALUE: the settings a run starts from, before the flags given."""
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help=f"a TOML file of {what}; a flag given explicitly overrides its value (default: none, every field at its "
        "default)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any config field, repeatable (model.n_layer=4 for a nested one), the value read as TOML (a bare "
        "word is a string); after --config, before the flags (default: none)",
    )


def read_config_file(path: str | Path, section: str) -> dict[str, Any]:
    """The fields a `--config` TOML file sets: its top level, with a `[section]` table's fields merged in; a study
    file (one with `[[models]]`) gives its `[section]` alone. An unreadable file or bad TOML is one error naming the
    file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read it ({err.strerror or err})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"--config {path} is not valid TOML ({err})") from None
    values = dict(data.get(section, {}))
    if isinstance(data.get("models"), list):  # a study's other keys configure the study, not this run
        return values
    twice = sorted(set(values) & set(data) - {section})
    if twice:
        raise ConfigError(f"--config {path}: give {twice[0]} once, at the top level or in [{section}]")
    values.update({k: v for k, v in data.items() if k != section})
    return values


def apply_settings(values: dict[str, Any], settings: Iterable[str]) -> dict[str, Any]:
    """`values` with every `--set KEY=VALUE` applied (dotted keys reach nested tables)."""
    for setting in settings:
        key, sep, text = setting.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set takes KEY=VALUE (e.g. --set lr=1e-3), got {setting!r}")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text  # a bare word: a string
        holder = values
        *parents, name = key.strip().split(".")
        for parent in parents:
            holder = holder.setdefault(parent, {})
            if not isinstance(holder, dict):
                raise ConfigError(f"--set {setting}: {parent} is not a table of fields")
        holder[name] = value
    return values
