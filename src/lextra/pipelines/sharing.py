"""Work shared out among torchrun's processes: each does its share, then waits for the others' results on disk."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from lextra.train import Distributed

T = TypeVar("T")


def share_out(
    items: Sequence[T],
    world: Distributed,
    run: Callable[[T], object],
    done: Callable[[T], bool],
    *,
    poll: float = 1.0,
) -> None:
    """`run` each item of this process's share (every `world.size`-th from its rank, so no two processes take one)
    that is not `done`, then check every `poll` seconds until every other item is `done` (no barrier, whose timeout
    a long evaluation would exceed)."""
    for item in items[world.rank :: world.size]:
        if not done(item):
            run(item)
    wait_for([item for i, item in enumerate(items) if i % world.size != world.rank], done, poll=poll)


def wait_for(items: Sequence[T], done: Callable[[T], bool], *, poll: float = 1.0) -> None:
    """Return once `done(item)` has held for every item, checking those still pending every `poll` seconds."""
    pending = list(items)
    while pending:
        pending = [item for item in pending if not done(item)]
        if pending:
            time.sleep(poll)
