"""TensorBoard curves beside `metrics.jsonl` (needs the `tensorboard` extra): training scalars tagged
`train/<name>` at the optimizer step, and perplexity tagged `perplexity_<variant>/<protocol>` with the evaluation
length as its step."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from lextra.errors import ConfigError

INSTALL = "pip install 'lextra[tensorboard]'"
#: the folder of a run directory that holds its event files when no log_dir is given
DEFAULT_SUBDIR = "tb"
#: metrics.jsonl field -> TensorBoard tag (other fields: train/<field>)
TAGS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens_per_s": "train/tokens_per_s",
    "val_loss": "validation/loss",
}


class Curves(Protocol):
    """What `write_evaluation` reads of an evaluation (`lextra.evaluate.Evaluation`)."""

    @property
    def protocols(self) -> list[str]: ...

    def curve(self, protocol: str) -> Mapping[int, float]: ...


def require_tensorboard() -> None:
    """Raise the one-line install hint unless the `tensorboard` package imports."""
    try:
        import tensorboard  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            f"TensorBoard logging (--log-dir, [train] tensorboard = true) needs the tensorboard package ({err}); "
            f"install it with {INSTALL}, or turn tensorboard off"
        ) from None


def tag(field: str) -> str:
    """The TensorBoard tag of a metrics.jsonl field."""
    return TAGS.get(field, f"train/{field}")


class Board:
    """One writer's event files in `log_dir` (created); `close()` flushes them."""

    def __init__(self, log_dir: str | Path, purge_step: int | None = None) -> None:
        """`purge_step`: a resumed run's first step; TensorBoard hides what an earlier writer logged from there
        on (the steps after the last checkpoint, which the resumed run logs again)."""
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=purge_step)

    def record(self, record: Mapping[str, Any]) -> None:
        """One metrics.jsonl record: every number but `step`, at `step`; flushed, so a run that stops (diverged,
        interrupted) keeps its curves up to there, as metrics.jsonl does."""
        step = int(record["step"])
        for field, value in record.items():
            if field != "step":
                self.writer.add_scalar(tag(field), float(value), global_step=step)
        self.writer.flush()

    def evaluation(self, evaluation: Curves, variant: str = "causal") -> None:
        """Perplexity against evaluation length, one curve per protocol, tagged `perplexity_<variant>/<protocol>`
        (the variant: the inference mask, with any extension method or RoPE scaling)."""
        for protocol in evaluation.protocols:
            for length, perplexity in sorted(evaluation.curve(protocol).items()):
                self.writer.add_scalar(f"perplexity_{variant}/{protocol}", perplexity, global_step=int(length))
        self.writer.flush()

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


def run_log_dir(log_dir: str | None, run_dir: str | Path) -> Path:
    """Where a run's event files go: `log_dir` when given, else the run directory's `tb/`."""
    return Path(log_dir) if log_dir is not None else Path(run_dir) / DEFAULT_SUBDIR
