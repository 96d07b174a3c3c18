"""Where a lextra GPT run's batches come from (a prepared folder, the data cache's entry of the corpus, or a
training task's rows), and the check that a resumed run reads the data it was trained on."""

from __future__ import annotations

import json
from pathlib import Path

from lextra.data.corpora import mixture_weights
from lextra.data.positions import BatchSource
from lextra.data.prepare import PreparedData, PreparedFolder, prepare_data
from lextra.data.shards import PreparedShards, cached_shards, data_batches, data_cache_dir
from lextra.errors import ConfigError
from lextra.tasks.registry import parse_task_spec
from lextra.tasks.rows import row_source
from lextra.train.config import TrainConfig


def batch_source(config: TrainConfig, data: PreparedData) -> BatchSource:
    """Plain language modelling on the train split, or the rows of the training task `config.task`."""
    if config.task is None:
        return data_batches(data, config.order)
    return row_source(parse_task_spec(config.task), config, data)


def open_training_data(
    config: TrainConfig, progress: bool = True, *, prepare: bool = True
) -> tuple[PreparedData, bool]:
    """A run's data and whether it is the data cache's: `config.data`, the cache's entry of `config.corpus`, else
    the corpus read now. Only a process that may `prepare` writes a cache entry; the others wait for it."""
    if config.data is None:
        if config.task is not None or data_cache_dir() is None:
            if mixture_weights(config.corpus) is not None:
                why = f"the task {config.task!r} reads" if config.task is not None else "LEXTRA_DATA_CACHE=off reads"
                raise ConfigError(
                    f"a weighted mixture ({config.corpus}) samples prepared parts, but {why} the corpus into memory; "
                    "use plain language modelling with the data cache on, or --data DIR"
                )
            return prepare_data(config.corpus, config.tokenizer, config.limit_chars), False
        shards = cached_shards(config.corpus, config.tokenizer, config.limit_chars, progress=progress, prepare=prepare)
        return shards.prepared_data(), True
    shards = PreparedShards.open(config.data)
    shards.check_tokenizer(config.tokenizer)
    config.corpus, config.limit_chars = shards.manifest["source"], shards.manifest["limit_chars"]
    return shards.prepared_data(), False


def check_same_data(run_dir: Path, shards: PreparedFolder | None, *, cached: bool = False) -> None:
    """Refuse to resume on prepared data other than the run's (by manifest hash); a raw-corpus run continues on its
    cache entry (`cached`)."""
    saved_path = run_dir / "config.json"
    if not saved_path.exists():
        return
    saved = (json.loads(saved_path.read_text()).get("data") or {}).get("manifest_sha256")
    now = shards.sha256 if shards is not None else None
    if saved is None and cached:
        return
    if saved != now:
        was = f"prepared data with manifest sha256 {saved[:12]}" if saved else "the raw corpus"
        if shards is not None and cached:
            given = f"no --data given (the corpus' cache entry {shards.root} has manifest sha256 {shards.sha256[:12]})"
        elif shards is not None:
            given = f"{shards.root} has manifest sha256 {shards.sha256[:12]}"
        else:
            given = "no --data given"
        raise ConfigError(f"cannot resume {run_dir}: it was trained on {was}, {given}; resume with the data it used")
