"""A study's cached result cells: `cells/<section>/<name>.json` holding the key a result was computed for, the
result, its compute seconds and the code commit; a cell is reused only while its key is unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lextra.io import atomic_write_json


def cell_path(out: Path, section: str, name: str) -> Path:
    """Where a cell's record lives in the study folder `out`."""
    return out / "cells" / section / f"{name.replace(':', '-').replace('+', '_')}.json"


def read_cell(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The saved record at `path` when it was computed for `key`, else None."""
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    return record if record.get("key") == key else None


def write_cell(path: Path, key: dict[str, Any], result: Any, seconds: float, commit: str) -> None:
    """Save a computed cell (atomically: an interrupted write leaves the old record or none)."""
    atomic_write_json(path, {"key": key, "result": result, "seconds": round(seconds, 1), "commit": commit})
