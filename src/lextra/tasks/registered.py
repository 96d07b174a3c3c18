"""Importing this registers every built-in task: each module below `lextra.tasks` that defines tasks registers
them on import (`TRAINING_TASKS`, the retrieval and RULER registries); `lextra.tasks` imports this module last,
so importing any part of the package completes the registries."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

#: registered first, so every listing reads retrieval tasks, then RULER's rows, then the algorithmic tasks
FIRST = ("lextra.tasks.retrieval", "lextra.tasks.ruler")

for _name in FIRST:
    importlib.import_module(_name)
for _info in pkgutil.walk_packages([str(Path(__file__).parent)], "lextra.tasks."):
    if _info.name != __name__:
        importlib.import_module(_info.name)
