"""Rewrite the stored keys of study cells to the keys this lextra computes for the same configs.

A study reuses a cell (`cells/<section>/<name>.json`, `lextra.pipelines.study.cells`) while its stored key equals
the key it computes. Training, retrieval and task cells are keyed by training configs, whose model config states
its layers as one layer plan (`GPTConfig.layer_plan`). Cells stored with a model config that states them by
`scheme`, `scheme_options` and `log_scaling` are rewritten here: each such model config becomes the one
`GPTConfig.from_dict` reads from it (the plan those fields make), every other part of the key and the record kept
as it is. A cell already in that form is left untouched, so running it twice changes nothing.

    python experiments/rekey_cells.py docs/studies/hybrids-3seeds/cells [FOLDER ...]

Each FOLDER is searched recursively for cell files; the script prints how many it rewrote.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lextra.io import atomic_write_json
from lextra.model import STATED_BY_SCHEME, GPTConfig


def rekeyed(value: Any) -> Any:
    """`value` with every model config stated by scheme fields replaced by its layer-plan form."""
    if isinstance(value, dict):
        if "n_layer" in value and STATED_BY_SCHEME & set(value):
            return GPTConfig.from_dict(value).to_dict()
        return {k: rekeyed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rekeyed(v) for v in value]
    return value


def rekey_folder(folder: Path) -> int:
    """Rewrite the cells under `folder` whose keys changed; returns how many."""
    changed = 0
    for path in sorted(folder.rglob("*.json")):
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or "key" not in record:
            continue
        key = rekeyed(record["key"])
        if key != record["key"]:
            atomic_write_json(path, {**record, "key": key})
            changed += 1
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="cells folders (a study's cells/ or one section)")
    for folder in parser.parse_args().folders:
        print(f"{folder}: {rekey_folder(folder)} cell(s) rekeyed")


if __name__ == "__main__":
    main()
