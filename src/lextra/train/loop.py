"""The one training loop: `Trainer` runs any `TrainingTarget` for `config.steps` AdamW steps with warmup and
cosine decay, replicated (DDP) or sharded (FSDP2) under torchrun. Batches are a pure function of (seed, step, rank),
so a resumed run continues exactly; a non-finite step stops the run before anything of it is saved
(`TrainingDivergedError`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from lextra.data import EpochOrder
from lextra.data.packing import PackedDocuments
from lextra.devices import resolve_device
from lextra.errors import CheckpointError, ConfigError, TrainingDivergedError
from lextra.io import atomic_write_json
from lextra.locks import run_lock
from lextra.train.checkpoints import CHECKPOINTS, checkpoint_candidates, resume, save_checkpoint, saved_position
from lextra.train.config import learning_rate
from lextra.train.distributed import Distributed
from lextra.train.metrics import Metrics
from lextra.train.sharding import check_sharding, full_tensor, is_sharded, local_tensor, shard_model
from lextra.train.target import StepFunction, TrainingTarget


class Trainer:
    """Trains `target` into `run_dir` on `device` (None: CUDA when available); `on_step(done)` runs after every
    step. `run()` returns what the target's `finish` returns."""

    def __init__(
        self,
        target: TrainingTarget,
        run_dir: str | Path,
        *,
        resume: bool = False,
        progress: bool = True,
        device: str | torch.device | None = None,
        on_step: Callable[[int], None] | None = None,
    ) -> None:
        self.target, self.config = target, target.config
        self.run_dir, self.resume, self.progress, self.on_step = Path(run_dir), resume, progress, on_step
        self.device_spec = device
        self.device = torch.device("cpu")
        self.world = Distributed()
        self.sampler = target.sampler()

    def run(self) -> Any:
        with run_lock(self.run_dir):
            return self._run()

    def _run(self) -> Any:
        """`run` in the run folder whose lock this process holds: set up, resume, loop, finish."""
        config, target, run_dir = self.config, self.target, self.run_dir
        self.device = resolve_device(self.device_spec)
        world = self.world = Distributed.from_environment(self.device)
        check_sharding(config.fsdp, world.size)
        if config.batch_size % world.size:
            raise ConfigError(
                f"the global batch ({config.batch_size}) must divide evenly over {world.size} processes; "
                f"use a --batch-size that is a multiple of {world.size}"
            )
        if not self.resume and any((run_dir / CHECKPOINTS).glob("step_*")):
            raise ConfigError(
                f"{run_dir} already holds a {target.kind} run; pass --resume to continue it or use a new --out"
            )
        target.open_data(world, run_dir, self.resume, self.progress and world.is_main)
        if world.is_main:
            atomic_write_json(run_dir / "config.json", target.run_record())
        world.barrier()
        model = target.build(self.device, world)
        if config.fsdp:  # every target alike: its units one at a time, then the root
            shard_model(model, target.shard_units(), self.device, world.size)
        optimizer = target.optimizer()
        start = resume(run_dir, target, optimizer, self.device, target.command) if self.resume else 0
        self._check_position(start)
        target.started(start, optimizer)
        network = model if config.fsdp else world.wrap(model)
        model.train()
        self._loop(target.step_function(network), optimizer, start)
        self._check_weights(config.steps, learning_rate(config, config.steps - 1))
        save_checkpoint(
            run_dir, target, optimizer, config.steps, write=world.is_main, position=self._position(config.steps),
            device=self.device,
        )  # fmt: skip
        result = target.finish(run_dir, world)
        world.close()
        return result

    def _loop(self, step_function: StepFunction, optimizer: torch.optim.Optimizer, start: int) -> None:
        """Steps `start` .. `config.steps - 1`, with the progress bar and the curves."""
        config, world = self.config, self.world
        metrics = Metrics(
            self.run_dir, start, write=world.is_main, tensorboard=config.tensorboard, log_dir=config.log_dir
        )
        bar = tqdm(total=config.steps, initial=start, disable=not (self.progress and world.is_main), unit="step",
                   dynamic_ncols=True, desc=self.target.label, file=sys.stderr)  # fmt: skip
        try:
            for step in range(start, config.steps):
                self._step(step, step_function, optimizer, metrics, bar)
        finally:
            bar.close()
            metrics.close()

    def _step(
        self, step: int, step_function: StepFunction, optimizer: torch.optim.Optimizer, metrics: Metrics, bar: tqdm
    ) -> None:
        """One optimizer step, its finiteness check, its record and checkpoint."""
        config, target, world = self.config, self.target, self.world
        lr = learning_rate(config, step)
        for group in optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        # the global batch is the same whatever the number of processes; each takes its own rows. One position
        # vector per step, the same on every process (drawn for the global batch: rank 0)
        tokens, drawn = target.batch(step)
        batch = world.shard(tokens)
        positions = None if drawn is None else drawn.to(self.device)
        optimizer.zero_grad(set_to_none=True)
        loss = step_function(batch.to(self.device), positions)
        grad_norm = clip_gradients([p for _, p in target.trainable()], config.grad_clip)
        done = step + 1
        failed = non_finite(world, loss, grad_norm)
        if failed:  # before the update, so the weights in memory and on disk are the last good ones
            raise self._diverged(done, lr, failed)
        optimizer.step()
        metrics.count(config.batch_size * target.length)
        self._record(done, lr, loss, grad_norm, metrics, bar)
        if config.checkpoint_every and done % config.checkpoint_every == 0 and done < config.steps:
            self._check_weights(done, lr)
            save_checkpoint(self.run_dir, target, optimizer, done, write=world.is_main, position=self._position(done),
                            device=self.device)  # fmt: skip
            world.barrier()
        bar.update(1)
        if self.on_step is not None:
            self.on_step(done)

    def _record(
        self, done: int, lr: float, loss: torch.Tensor, grad_norm: torch.Tensor, metrics: Metrics, bar: tqdm
    ) -> None:
        """The metrics record of step `done` when one is due (loss, lr, gradient norm, tokens/s, epoch, validation)."""
        config = self.config
        record: dict[str, Any] | None = None
        if config.log_every and (done % config.log_every == 0 or done == config.steps):
            tokens_per_s = metrics.tokens_per_s()
            record = {"step": done, "loss": self.world.mean(loss.detach()), "lr": lr, "grad_norm": grad_norm.item(),
                      "tokens_per_s": round(tokens_per_s, 1)}  # fmt: skip
            position = self._position(done)
            if position is not None:  # epochs done, as a fraction
                record["epoch"] = round(position["epoch"] + position["window"] / position["windows"], 4)
            bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{tokens_per_s:,.0f}")
        validation = self.target.validation_loss(done)
        if validation is not None:
            record = (record or {"step": done}) | {"val_loss": validation}
        if record:
            metrics.record(record)

    def _position(self, step: int) -> dict[str, int] | None:
        """Where an epoch-order run stands after `step` steps (None in i.i.d. order), in windows as read."""
        stream = self.target.stream
        if isinstance(stream, PackedDocuments):  # packed windows follow the draws of the order they wrap
            stream = stream.source
        if not isinstance(stream, EpochOrder):
            return None
        return stream.position(step, self.config.batch_size, self.sampler.read_length)

    def _check_position(self, start: int) -> None:
        """Refuse to resume an epoch-order run whose checkpoint stands elsewhere in the data than step `start` does."""
        expected = self._position(start)
        if expected is None or start == 0:
            return
        saved = saved_position(self.run_dir, start)
        if saved != expected:
            raise CheckpointError(
                f"cannot resume {self.run_dir}: its checkpoint at step {start} stands at {saved} in the data, this "
                f"run's windows put step {start} at {expected}; resume with the data it used"
            )

    def _check_weights(self, done: int, lr: float) -> None:
        """Stop before a checkpoint would save non-finite weights (a finite gradient times a huge learning rate)."""
        named = self.target.trainable()
        with torch.no_grad():
            flags = torch.stack([~torch.isfinite(local_tensor(p)).all() for _, p in named]).float()
        bad = [name for (name, _), flag in zip(named, self.world.total(flags).tolist(), strict=True) if flag]
        if bad:  # every process sums the same flags, so all of them stop here
            raise self._diverged(done, lr, f"weights ({', '.join(bad[:3])})")

    def _diverged(self, step: int, lr: float, what: str) -> TrainingDivergedError:
        """The one-line error of a run that went non-finite at `step`, with cause and fix; closes the group first."""
        self.world.close()
        config = self.config
        candidates = checkpoint_candidates(self.run_dir)
        last = candidates[0] if candidates else None
        causes = [f"a learning rate too high (lr {config.lr:g}, {lr:g} at this step)", *self.target.divergence_causes()]
        lower = f"{config.lr / 10:g}"
        if last is not None:
            fix = (
                f"continue from the last good checkpoint, step {int(last.name.split('_')[-1])} ({last}), "
                f"with --resume and a lower learning rate, e.g. --lr {lower}"
            )
        else:
            fix = f"no checkpoint was saved before it: rerun with a lower learning rate, e.g. --lr {lower}"
        return TrainingDivergedError(
            f"training diverged at step {step} of {config.steps}: the {what} became non-finite (nan or inf), so "
            f"nothing of this step was saved; likely cause: {' or '.join(causes)}; {fix}",
            step=step,
            checkpoint=last,
        )


def clip_gradients(parameters: list[torch.nn.Parameter], grad_clip: float) -> torch.Tensor:
    """Scale the gradients down to a norm of at most `grad_clip`; their norm before (whole, when sharded)."""
    sharded = any(is_sharded(p) for p in parameters)
    foreach = None if sharded else all(p.device.type in ("cpu", "cuda") for p in parameters)
    return full_tensor(torch.nn.utils.clip_grad_norm_(parameters, grad_clip, foreach=foreach))


def non_finite(world: Distributed, loss: torch.Tensor, grad_norm: torch.Tensor) -> str:
    """Which of this step's loss (on any process) and gradient norm are non-finite, '' when neither is (one host
    sync per step, so every process stops alike)."""
    flags = torch.stack((~torch.isfinite(loss.detach()), ~torch.isfinite(grad_norm.detach()))).float()
    loss_bad, grad_bad = world.total(flags).tolist()
    names = [name for name, bad in (("loss", loss_bad), ("gradient norm", grad_bad)) if bad]
    return " and ".join(names)
