"""A study's missing cells computed in this process or side by side in worker processes of one thread each
(spawned: on 2 cores two one-thread runs give twice the tokens/s of one run on both)."""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from lextra.pipelines.log import log

T = TypeVar("T")


def run_cells(
    items: Sequence[T],
    name: Callable[[T], str],
    here: Callable[[T], object],
    in_worker: Callable[[T], object],
    jobs: int = 1,
    landed: Callable[[T], object] | None = None,
) -> None:
    """Compute every item: with `here` in this process, or with `in_worker` (picklable, saving its own cell) in
    `jobs` worker processes when jobs > 1 and there are two items or more, a worker taking the next item as soon as
    it is free; each logged with the ETA, then passed to `landed` in this process. A worker's failure is named on
    stderr and the others go on."""
    start = time.time()
    if jobs > 1 and len(items) > 1:
        context = multiprocessing.get_context("spawn")
        one_thread = functools.partial(torch.set_num_threads, 1)
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=one_thread) as pool:
            futures = {pool.submit(_named, in_worker, item, name(item)): item for item in items}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                future.result()
                _progress(done, len(items), start, name(futures[future]))
                if landed is not None:
                    landed(futures[future])
        return
    for done, item in enumerate(items, 1):
        here(item)
        _progress(done, len(items), start, name(item))
        if landed is not None:
            landed(item)


def _named(work: Callable[[T], object], item: T, label: str) -> None:
    """A worker's item; its failure named on stderr (the pool would lose the worker's traceback)."""
    try:
        work(item)
    except Exception as error:
        print(f"lextra study: cell {label} failed: {error}", file=sys.stderr)


def _progress(done: int, total: int, start: float, label: str) -> None:
    elapsed = time.time() - start
    eta = elapsed / done * (total - done)
    log("study", f"cell {done}/{total} done ({label}); {elapsed / 60:.1f} min so far, ETA {eta / 60:.1f} min")
