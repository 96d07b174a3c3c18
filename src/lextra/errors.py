"""User-facing errors: each names the problem and the fix, and the CLI prints it in one line (exit 2)."""

from __future__ import annotations

from pathlib import Path


class LextraError(ValueError):
    """A mistake in the user's input (config, options, lengths, paths, files)."""


class ConfigError(LextraError):
    """An invalid scheme, mask, model or training configuration."""


class LengthError(LextraError):
    """An input longer than a component supports (e.g. a learned position table)."""


class CheckpointError(LextraError):
    """A missing, corrupt or incompatible checkpoint."""


class DataError(LextraError):
    """A missing or empty corpus, or an unreadable data file."""


class LockedError(DataError):
    """A folder (prepared data, a run) that another process is writing: it holds the folder's lock."""


class TrainingDivergedError(LextraError):
    """A training run whose loss, gradient norm or weights became non-finite, stopped before saving them; `step`
    went non-finite and `checkpoint` is the last good one (None if none)."""

    def __init__(self, message: str, *, step: int, checkpoint: Path | None) -> None:
        super().__init__(message)
        self.step, self.checkpoint = step, checkpoint
