"""A study's missing cells computed in this process or side by side in worker processes of one thread each
(spawned: on 2 cores two one-thread runs give twice the tokens/s of one run on both)."""

from __future__ import annotations

import concurrent.futures
import ctypes
import multiprocessing
import os
import signal
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
) -> list[T]:
    """Compute every item: with `here` in this process, or with `in_worker` (picklable, saving its own cell) in
    `jobs` worker processes when jobs > 1 and there are two items or more, a worker taking the next item as soon as
    it is free; each logged with the ETA, then passed to `landed` in this process. A worker's failure is named on
    stderr, the others go on, and the failed items are returned (not landed). Workers end with this process, however
    it ends (a `kill` of the study included)."""
    start = time.time()
    failed: list[T] = []
    if jobs > 1 and len(items) > 1:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(
            jobs, mp_context=context, initializer=_worker_setup, initargs=(os.getpid(),)
        ) as pool:
            futures = {pool.submit(_named, in_worker, item, name(item)): item for item in items}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                item = futures[future]
                ok = future.result()
                _progress(done, len(items), start, name(item), ok)
                if not ok:
                    failed.append(item)
                elif landed is not None:
                    landed(item)
        if failed:
            log("study", f"{len(failed)} of {len(items)} cells failed (named above); run the command again to retry")
        return failed
    for done, item in enumerate(items, 1):
        here(item)
        _progress(done, len(items), start, name(item), True)
        if landed is not None:
            landed(item)
    return failed


def _worker_setup(parent: int) -> None:
    """A worker's one thread; on Linux the kernel also ends it when the study process ends (PR_SET_PDEATHSIG), so a
    killed study leaves no worker training on and holding its run folder's lock."""
    torch.set_num_threads(1)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the study ended before the request took effect
            os._exit(1)


def _named(work: Callable[[T], object], item: T, label: str) -> bool:
    """A worker's item, whether it succeeded; its failure named on stderr (the pool would lose its traceback)."""
    try:
        work(item)
    except Exception as error:
        print(f"lextra study: cell {label} failed: {error}", file=sys.stderr)
        return False
    return True


def _progress(done: int, total: int, start: float, label: str, ok: bool) -> None:
    elapsed = time.time() - start
    eta = elapsed / done * (total - done)
    state = "done" if ok else "failed"
    log("study", f"cell {done}/{total} {state} ({label}); {elapsed / 60:.1f} min so far, ETA {eta / 60:.1f} min")
