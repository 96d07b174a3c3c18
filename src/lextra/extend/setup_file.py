"""Setup files: an `InferenceSetup` as JSON (written by `lextra tune` or by hand), read with `--setup FILE` or
`load_setup(path)`: `{"format": "lextra-setup", "version": 1, "setup": {...}, ...}`. `setup` holds any of
`rope_scaling`, `extension`, `mask`, `log_scaling` and `layers`; a field left out stays as the model has it, null
removes it. Other top-level keys are kept and ignored. Temperatures come from an alignment.json instead."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lextra.attention.masks import MASKS
from lextra.errors import ConfigError, DataError
from lextra.extend.base import EXTENSIONS
from lextra.extend.setup import KEEP, InferenceSetup
from lextra.io import atomic_write_json
from lextra.positions.logn import log_scaling_names
from lextra.positions.scaling import SCALING_TYPES, parse_rope_scaling, scaling_type_of

FORMAT = "lextra-setup"
VERSION = 1
#: the InferenceSetup fields a setup file may hold
SETUP_FIELDS = ("rope_scaling", "extension", "mask", "log_scaling", "layers")


@dataclass
class SetupFile:
    """A setup file's setup and everything else it records (`lextra tune`'s search under `extra["tune"]`)."""

    setup: InferenceSetup
    extra: dict[str, Any] = field(default_factory=dict)


def setup_fields(setup: InferenceSetup) -> dict[str, Any]:
    """The fields a setup sets, as a setup file writes them; refuses what a file cannot hold."""
    changes = setup.changes()
    stored: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in SETUP_FIELDS:
            raise ConfigError(f"a setup file holds {', '.join(SETUP_FIELDS)}; {name} cannot be written to one")
        if value is not None and not isinstance(value, str | dict):
            raise ConfigError(f"setup field {name} must be a spec string to be written, got {type(value).__name__}")
        stored[name] = value
    return stored


def save_setup(path: str | Path, setup: InferenceSetup, **extra: Any) -> Path:
    """Write `setup` (and `extra` top-level entries, e.g. `tune=record`) to `path` as a setup file, atomically."""
    document = {"format": FORMAT, "version": VERSION, "setup": setup_fields(setup), **extra}
    out = Path(path)
    atomic_write_json(out, document)
    return out


def read_setup_file(path: str | Path) -> SetupFile:
    """The setup file at `path`, every field checked (errors name the file and the field)."""
    where = Path(path)
    try:
        document = json.loads(where.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"setup file {where}: cannot be read ({err.__class__.__name__}: {err})") from None
    except json.JSONDecodeError as err:
        raise DataError(f"setup file {where}: not JSON ({err}); write it with `lextra tune` or by hand") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise DataError(f'setup file {where}: field format: expected "{FORMAT}" (a file from `lextra tune`)')
    if document.get("version") != VERSION:
        raise DataError(f"setup file {where}: field version: expected {VERSION}, got {document.get('version')!r}")
    fields = document.get("setup")
    if not isinstance(fields, dict):
        raise DataError(f"setup file {where}: field setup: expected an object of {', '.join(SETUP_FIELDS)}")
    values: dict[str, Any] = {}
    for name, value in fields.items():
        if name not in SETUP_FIELDS:
            raise DataError(f"setup file {where}: field setup.{name}: unknown; a setup holds {', '.join(SETUP_FIELDS)}")
        try:
            values[name] = _checked(name, value)
        except ConfigError as err:
            raise DataError(f"setup file {where}: field setup.{name}: {err}") from None
    extra = {k: v for k, v in document.items() if k not in ("format", "version", "setup")}
    return SetupFile(InferenceSetup(**values), extra)


def load_setup(path: str | Path) -> InferenceSetup:
    """The `InferenceSetup` a setup file states (`read_setup_file`), for `setup.apply(model)`."""
    return read_setup_file(path).setup


#: what a field other than `log_scaling` holds besides null, and the registry check of its spec string
_SPECS: dict[str, tuple[str, Callable[[str], object]]] = {
    "rope_scaling": ("a scaling spec (yarn:4), an object with a 'rope_type',", parse_rope_scaling),
    "extension": ("a spec string", lambda spec: spec == "none" or EXTENSIONS.parse(spec)),
    "mask": ("a spec string", MASKS.parse),
    "layers": ("a layer selector (rotary, global, 0,3 ...)", lambda spec: None),  # read with the model
}


def _checked(name: str, value: Any) -> Any:
    """A field's value, checked as far as it can be without a model (spec names and options, types)."""
    if name == "log_scaling":
        names = log_scaling_names(inference=True)
        if value not in names:
            raise ConfigError(f"expected one of {', '.join(names)}, got {json.dumps(value)}")
        return value
    kind = value.get("rope_type", value.get("type")) if isinstance(value, dict) else None
    if name == "rope_scaling" and isinstance(kind, str):
        SCALING_TYPES.get(scaling_type_of(value))
        return dict(value)
    expected, check = _SPECS[name]
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"expected {expected} or null, got {json.dumps(value)}")
    if value is not None:
        check(value)
    return value


def setup_summary(setup: InferenceSetup) -> str:
    """The setup as one short label: `self_extend:group=4,window=512`, `yarn:8`, `longrope (32 factors)`."""
    parts: list[str] = []
    for name in SETUP_FIELDS:
        value = getattr(setup, name)
        if value is KEEP or value is None or (name == "layers" and value is None):
            continue
        if isinstance(value, dict):
            value = _scaling_label(value)
        parts.append(str(value) if name != "layers" else f"@{value}")
    return "+".join(parts) or "none"


def _scaling_label(scaling: dict[str, Any]) -> str:
    """A scaling object as a spec-like label: `yarn,factor=4,beta_fast=16`, `longrope,factor=4 (32 factors)`."""
    kind = str(scaling.get("rope_type", scaling.get("type", "scaling")))
    items = [
        f"{k}={v:g}"
        for k, v in scaling.items()
        if isinstance(v, float | int) and not isinstance(v, bool) and k != "original_max_position_embeddings"
    ]
    lists = [len(v) for v in scaling.values() if isinstance(v, list)]
    label = ",".join([kind, *items])
    return label + (f" ({lists[-1]} factors)" if lists else "")
