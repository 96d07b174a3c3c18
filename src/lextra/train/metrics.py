"""A run's curves: `metrics.jsonl` (one record per logged step; a resumed run drops the records past its
checkpoint) and, when asked, TensorBoard event files, with the tokens per second since the last record."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from lextra.io import atomic_write_text
from lextra.tensorboard import Board, run_log_dir

METRICS = "metrics.jsonl"


def truncate_metrics(path: Path, step: int) -> None:
    """Keep the metrics of steps <= `step`, so a resumed run's log has no duplicates."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def final_losses(run_dir: Path) -> dict[str, float]:
    """The last logged training loss (`loss`) and validation loss (`val_loss`) of a run, those it has."""
    path = Path(run_dir) / METRICS
    found: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            found.update({k: float(record[k]) for k in ("loss", "val_loss") if k in record})
    return found


class Metrics:
    """The writer of one run's curves from step `start` on (only the process that `write`s writes)."""

    def __init__(self, run_dir: Path, start: int, *, write: bool, tensorboard: bool, log_dir: str | None) -> None:
        self.path = run_dir / METRICS
        self.write = write
        self.board: Board | None = None
        if write:
            truncate_metrics(self.path, start)
            if tensorboard:
                self.board = Board(run_log_dir(log_dir, run_dir), purge_step=start or None)
        self.window_start, self.window_tokens = time.perf_counter(), 0

    def count(self, tokens: int) -> None:
        """Add a step's tokens to the throughput window."""
        self.window_tokens += tokens

    def tokens_per_s(self) -> float:
        """The throughput since the last call (which starts a new window)."""
        rate = self.window_tokens / max(time.perf_counter() - self.window_start, 1e-9)
        self.window_start, self.window_tokens = time.perf_counter(), 0
        return rate

    def record(self, record: dict[str, Any]) -> None:
        """Append one record to metrics.jsonl and the event files."""
        if not self.write:
            return
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.board is not None:
            self.board.record(record)

    def close(self) -> None:
        if self.board is not None:
            self.board.close()
            self.board = None
