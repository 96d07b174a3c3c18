"""Importing this registers every built-in algorithmic task: each module below `lextra.tasks` that defines tasks
registers them in `TRAINING_TASKS` on import (`TRAINING_TASKS.fill()` imports this module)."""

from __future__ import annotations

import importlib
import pkgutil

import lextra.tasks
from lextra.training_tasks import TRAINING_TASKS

#: the registry the imported modules fill
REGISTRY = TRAINING_TASKS

for _info in pkgutil.walk_packages(lextra.tasks.__path__, "lextra.tasks."):
    if _info.name != __name__:
        importlib.import_module(_info.name)
