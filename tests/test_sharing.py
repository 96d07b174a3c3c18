"""`share_out`: torchrun's processes split the missing cells by index and wait on the saved files, not a barrier."""

from __future__ import annotations

import threading
import time

from lextra.pipelines.sharing import share_out
from lextra.train import Distributed


def test_each_item_is_run_once_by_its_owner_however_the_processes_saw_the_saved_files() -> None:
    """Two processes (threads here) with different views of what was saved: item 0 was saved before process 0
    looked, after process 1 did. Process 1 does not take it (it is process 0's), and nothing is run twice."""
    saved = {0}
    ran: dict[int, list[int]] = {0: [], 1: []}
    lock = threading.Lock()

    def process(rank: int, seen: set[int]) -> None:
        def run(item: int) -> None:
            time.sleep(0.05 * (item + 1))  # the longest item takes 0.25 s: the others wait without a collective
            with lock:
                ran[rank].append(item)
                saved.add(item)

        share_out(range(5), Distributed(rank, 2), run, lambda item: item in seen or item in saved, poll=0.01)

    threads = [threading.Thread(target=process, args=(0, {0})), threading.Thread(target=process, args=(1, set()))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)
    assert ran == {0: [2, 4], 1: [1, 3]}
    assert saved == {0, 1, 2, 3, 4}


def test_one_process_runs_every_item_not_done_in_order() -> None:
    ran: list[str] = []
    share_out(["a", "b", "c", "d"], Distributed(), ran.append, lambda item: item in {"b", *ran}, poll=0.01)
    assert ran == ["a", "c", "d"]
