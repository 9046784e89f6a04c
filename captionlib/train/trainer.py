"""The epoch loop shared by XE and every RL objective.

Per epoch: train steps (progress lines with rate and ETA every ``log_interval`` steps,
TensorBoard scalars), validation, then checkpoints written atomically:

* ``latest.pth``: everything needed to resume (model, optimizer, objective's own
  modules, epoch, history, RNG states); a killed job re-run with the same command
  continues after the last finished epoch, and a finished one returns at once;
* ``<N>epoch.pth``: model file of epoch N (kept for the ``keep_nbest`` best epochs);
* ``valid.<metric>.best.pth``: model file of the best epoch per validation metric;
* ``history.json``: per-epoch train/valid statistics (read by checkpoint averaging);
* ``env.yaml``: the code's git revision and the library versions, written once the run's
  first epoch is saved (a resume in another environment keeps the old file as ``env.yaml.N``;
  :func:`captionlib.utils.provenance.write_environment`).

Under ``torchrun`` (see :mod:`captionlib.utils.distributed`) every rank runs this loop on
its block of each global batch; the loss is weighted by each rank's share of the global
count, gradients are summed over ranks, and the logged statistics are global. Rank 0 alone
validates, writes checkpoints, TensorBoard and ``history.json``; the other ranks wait for it
in the next collective. Resuming reads ``latest.pth`` on every rank.
"""

import contextlib
import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from captionlib.models.captioner import model_file_dict
from captionlib.train.options import TrainOptions
from captionlib.utils import distributed as dist_util
from captionlib.utils.fileio import atomic_save, atomic_write_text, exp_dir_lock, load_checkpoint
from captionlib.utils.provenance import environment, write_environment

#: Mixed-precision modes (``--amp``): autocast dtype on CUDA (fp16 with a gradient scaler).
AMP_MODES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}

Objective = Callable[[nn.Module, Any], Tuple[torch.Tensor, Dict[str, float]]]


def set_seed(seed: int) -> None:
    """Seed python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def numpy_rng_state(state: Optional[tuple] = None) -> Dict[str, Any]:
    """numpy's global RNG state in plain types and a tensor, which ``latest.pth`` stores so
    that it loads with ``torch.load(weights_only=True)`` (a numpy array would need unpickling
    numpy's classes).

    Args:
        state: a state tuple ``(bit generator name, uint32 key (624,), pos, has_gauss,
            cached_gaussian)`` as ``np.random.get_state()`` gives it (the default; the
            ``latest.pth`` of older captionlib versions held it as is).

    Returns:
        ``{"bit_generator", "key": int64 tensor (624,), "pos", "has_gauss", "cached_gaussian"}``,
        read back by :func:`set_numpy_rng_state`.
    """
    name, key, pos, has_gauss, gauss = np.random.get_state() if state is None else state
    return {"bit_generator": str(name), "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
            "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(gauss)}


def set_numpy_rng_state(state: Dict[str, Any]) -> None:
    """Restore numpy's global RNG from a :func:`numpy_rng_state` dict."""
    np.random.set_state((state["bit_generator"], state["key"].numpy().astype(np.uint32), state["pos"],
                         state["has_gauss"], state["cached_gaussian"]))


def _fmt_time(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Trainer:
    """Run epochs of ``objective`` with validation and resumable, atomic checkpoints.

    Args:
        model: the captioner (its state goes into model files).
        optimizer: optimizer over the model's (and the objective's) parameters.
        objective: ``objective(model, batch) -> (loss, stats)``; if it is an
            ``nn.Module`` (critic, learned baseline), its state is saved for resume too.
            ``loss`` and every stat are means over the same units; ``stats["num_units"]``
            (popped) says how many (e.g. target tokens), else the batch's items
            (``len(batch[0])``): data-parallel ranks weight the loss and the stats by it
            (a stat over other units, such as a per-token entropy, is then weighted wrongly). An objective with a
            true ``row_sharded_randomness`` attribute makes the same sequence of random
            draws on every rank and is run inside
            :func:`captionlib.utils.distributed.row_sharded_randomness`; any other draws
            from its rank's own stream (:func:`~captionlib.utils.distributed.rank_random_stream`).
            An objective with an ``updates_per_batch`` attribute N is called N times on each
            batch, one optimizer step each (PPO's epochs over one batch of samples).
        train_loader: a fresh iterable of batches per epoch (re-seeded per epoch).
        validate: ``validate(model) -> {metric: value}`` run in eval mode under no_grad.
        opts: the training options (:class:`captionlib.train.options.TrainOptions`); the
            loop reads ``output_dir`` (the experiment directory), ``max_epoch``,
            ``keep_nbest`` (epoch model files kept, by the first criterion), ``grad_clip``
            (max gradient L2 norm, 0 = off), ``log_interval`` (steps between progress
            lines), ``accum_grad`` (batches summed into one optimizer step; the last window
            of an epoch may be shorter and is averaged over its own batches) and ``amp``
            (mixed precision on CUDA, a key of :data:`AMP_MODES`: ``bf16`` autocasts to
            bfloat16, ``fp16`` to float16 with a dynamic gradient scaler saved for resume;
            ignored with a warning on CPU).
        model_conf, token_list: stored in every model file (self-describing).
        best_criteria: ``[(metric, "max"|"min"), ...]``; a model file per metric.
        device: where batches go (the model/objective must already be there).
        extra_file_info: more keys stored in model files (e.g. ``rl_algo``).
        scheduler: a learning-rate scheduler stepped after every optimizer step (its state
            is saved for resume), or ``None``; its learning rate is logged as ``lr``.
        inputs: what the run is trained from, ``{name: fingerprint}`` (see
            :func:`captionlib.train.fit.fingerprint`: the token list, the training text and
            features, the model config, ...), saved in ``latest.pth``; resuming a run whose
            inputs changed since is refused, naming them.
        epoch_start: ``epoch_start(epoch)`` is called on every rank before each training
            epoch (1-based), before the model is put in training mode, e.g. to freeze or
            unfreeze a module by epoch (``freeze_encoder: N``). What it sets must
            depend on the epoch number alone: a resumed run calls it for its first epoch
            and so is in the state of an uninterrupted one.

    Raises:
        ValueError: ``max_epoch`` or ``accum_grad`` below 1 (nothing would be trained, and
            no model written), ``accum_grad`` > 1 with ``updates_per_batch`` > 1, or an unknown ``amp``.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        objective: Objective,
        train_loader: Callable[[int], Iterable],
        validate: Callable[[nn.Module], Dict[str, float]],
        opts: TrainOptions,
        model_conf: Dict[str, Any],
        token_list: Sequence[str],
        best_criteria: Sequence[Tuple[str, str]] = (("cider_d", "max"),),
        device: torch.device = torch.device("cpu"),
        extra_file_info: Optional[Dict[str, Any]] = None,
        scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None,
        inputs: Optional[Dict[str, str]] = None,
        epoch_start: Optional[Callable[[int], None]] = None,
    ):
        for key in ("max_epoch", "accum_grad"):
            if getattr(opts, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(opts, key)}")
        #: optimizer steps per batch: the objective's ``updates_per_batch`` (PPO's epochs over one
        #: batch of samples), else 1
        self.updates_per_batch = int(getattr(objective, "updates_per_batch", 1))
        if self.updates_per_batch > 1 and opts.accum_grad > 1:
            raise ValueError(f"accum_grad {opts.accum_grad} with an objective of {self.updates_per_batch} updates per "
                             "batch: each of its updates is one batch's, give accum_grad 1")
        amp = opts.amp
        if amp not in AMP_MODES:
            raise ValueError(f"amp must be one of {', '.join(AMP_MODES)}, got {amp!r}")
        if amp != "none" and device.type != "cuda":
            logging.warning("amp %s is for CUDA devices; training on %s in float32", amp, device)
            amp = "none"
        self.amp_dtype = AMP_MODES[amp]
        self.scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
        self.rank, self.world_size = dist_util.rank_and_world()
        self.row_sharded = bool(getattr(objective, "row_sharded_randomness", False))
        self.model, self.optimizer, self.objective = model, optimizer, objective
        self.train_loader, self.validate = train_loader, validate
        self.output_dir = Path(opts.output_dir)
        self.max_epoch, self.model_conf, self.token_list = opts.max_epoch, model_conf, list(token_list)
        self.best_criteria, self.keep_nbest = list(best_criteria), opts.keep_nbest
        self.grad_clip, self.accum_grad, self.scheduler = opts.grad_clip, opts.accum_grad, scheduler
        self.inputs = dict(inputs or {})
        self.log_interval, self.device = opts.log_interval, device
        self.extra_file_info = extra_file_info or {}
        self.epoch_start = epoch_start
        self.history: List[Dict[str, float]] = []

    # ---------------------------------------------------------------- state
    def _resume(self) -> int:
        path = self.output_dir / "latest.pth"
        if not path.exists():
            return 1
        # on CPU: RNG states must stay CPU byte tensors; model/optimizer states are copied
        # onto their parameters' device by load_state_dict
        state = load_checkpoint(path)
        self._check_inputs(path, state.get("inputs"))
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if isinstance(self.objective, nn.Module) and "objective" in state:
            self.objective.load_state_dict(state["objective"])
        if self.scaler is not None and "grad_scaler" in state:
            self.scaler.load_state_dict(state["grad_scaler"])
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        self.history = state["history"]
        if self.rank == 0 and self._read_history() != self.history:  # killed between latest.pth and history.json
            self._write_history()
        torch.set_rng_state(state["rng"]["torch"])
        set_numpy_rng_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        if "cuda" in state["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        if "cuda_rank" in state["rng"] and self.device.type == "cuda":
            # data-parallel ranks draw in step: rank 0's generator state is every rank's
            torch.cuda.set_rng_state(state["rng"]["cuda_rank"], self.device)
        logging.info("resumed from %s (epoch %d finished)", path, state["epoch"])
        return state["epoch"] + 1

    def _check_inputs(self, path: Path, saved: Optional[Dict[str, str]]) -> None:
        """Refuse to resume from ``path`` when what the run is trained from has changed.

        Raises:
            RuntimeError: naming the inputs that changed and what to do.
        """
        if saved is None:
            if self.inputs:
                logging.warning("%s records no inputs (written by an older captionlib): resuming unchecked", path)
            return
        changed = sorted(k for k in set(saved) | set(self.inputs) if saved.get(k) != self.inputs.get(k))
        if changed:
            raise RuntimeError(
                f"{path} was trained from other inputs than this run's: {', '.join(changed)} changed since. "
                f"Resuming would continue (or, when finished, keep) a model of the old inputs: remove "
                f"{self.output_dir} to train afresh, or give this run another output dir (e.g. another config "
                "name or tag)")

    def _model_file(self, epoch: int) -> dict:
        return model_file_dict(
            self.model, self.model_conf, self.token_list, epoch=epoch, **self.extra_file_info
        )

    def _save(self, epoch: int) -> None:
        out = self.output_dir
        model_file = self._model_file(epoch)
        atomic_save(model_file, out / f"{epoch}epoch.pth")
        for metric, mode in self.best_criteria:
            vals = [h[f"valid_{metric}"] for h in self.history if f"valid_{metric}" in h]
            if not vals:
                continue
            best = max(vals) if mode == "max" else min(vals)
            if self.history[-1].get(f"valid_{metric}") == best:
                atomic_save(model_file, out / f"valid.{metric}.best.pth")
                logging.info("epoch %d is the best so far by valid %s (%.4f)", epoch, metric, best)
        # keep the n best epoch files by the first criterion (and the last epoch)
        metric, mode = self.best_criteria[0]
        ranked = sorted(
            (h for h in self.history if f"valid_{metric}" in h),
            key=lambda h: h[f"valid_{metric}"],
            reverse=(mode == "max"),
        )
        keep = {int(h["epoch"]) for h in ranked[: self.keep_nbest]} | {epoch}
        for h in self.history:
            e = int(h["epoch"])
            f = out / f"{e}epoch.pth"
            if e not in keep and f.exists():
                f.unlink()
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": epoch,
            "history": self.history,
            # plain types and tensors only, for load_checkpoint's weights_only loading (python's
            # state is a tuple of ints, which it reads as is)
            "rng": {"torch": torch.get_rng_state(), "numpy": numpy_rng_state(), "python": random.getstate()},
        }
        if torch.cuda.is_available():
            state["rng"]["cuda"] = torch.cuda.get_rng_state_all()
        if self.world_size > 1 and self.device.type == "cuda":
            state["rng"]["cuda_rank"] = torch.cuda.get_rng_state(self.device)
        if isinstance(self.objective, nn.Module):
            state["objective"] = self.objective.state_dict()
        if self.scaler is not None:
            state["grad_scaler"] = self.scaler.state_dict()
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self.inputs:
            state["inputs"] = self.inputs
        # latest.pth first: history.json never lists an epoch whose checkpoint was not saved (a
        # full disk); a crash between the two is mended on resume (_resume rewrites history.json)
        atomic_save(state, out / "latest.pth")
        self._write_history()

    def _write_history(self) -> None:
        atomic_write_text(self.output_dir / "history.json", json.dumps(self.history, indent=1) + "\n")

    def _read_history(self) -> Optional[List[Dict[str, float]]]:
        try:
            return json.loads((self.output_dir / "history.json").read_text())
        except (OSError, ValueError):
            return None

    # ---------------------------------------------------------------- loop
    def run(self) -> List[Dict[str, float]]:
        """Train until ``max_epoch``; returns the per-epoch history.

        Re-running a finished experiment returns at once; a killed one resumes after
        its last finished epoch. The output dir is locked meanwhile (see
        :func:`captionlib.utils.fileio.exp_dir_lock`).

        Raises:
            RuntimeError: another live trainer holds the output dir.
        """
        if self.rank > 0:  # rank 0 holds the lock for the whole group
            return self._run()
        with exp_dir_lock(self.output_dir):
            return self._run()

    def _backward(self, batch: Any) -> Dict[str, float]:
        """Forward and backward of one batch (this rank's block of a global batch), its
        gradients added to those of the batches before it in the accumulation window;
        returns the global stats."""
        batch = dist_util.pad_to_global(batch)
        amp = torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype else contextlib.nullcontext()
        own_stream = contextlib.nullcontext() if self.row_sharded else dist_util.rank_random_stream(self.device)
        with dist_util.row_sharded_randomness(self.row_sharded), own_stream, amp:
            loss, stats = self.objective(self.model, batch)
        count = stats.pop("num_units", None)
        if count is None and self.world_size > 1:
            count = len(batch[0])
        loss, stats, nonfinite = dist_util.reduce_step(loss, stats, float(count or 0))
        if nonfinite:
            raise FloatingPointError(f"non-finite loss {loss.item()}" + (
                f" (on some of the {self.world_size} ranks)" if self.world_size > 1 else ""))
        if self.accum_grad > 1:
            loss = loss / self.accum_grad
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return stats

    def _update(self, batches: int) -> Dict[str, float]:
        """The optimizer step after ``batches`` accumulated batches (gradients summed over
        ranks, averaged over the batches, clipped), then the scheduler step; returns its
        stats (``grad_norm``, ``lr``)."""
        stats: Dict[str, float] = {}
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        dist_util.all_reduce_gradients(params)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if batches != self.accum_grad:  # a short last window: the mean over its own batches
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(self.accum_grad / batches)
        if self.grad_clip > 0:
            norm = float(nn.utils.clip_grad_norm_(params, self.grad_clip))
            if self.scaler is None or math.isfinite(norm):  # fp16 overflow: the scaler skips the step
                stats["grad_norm"] = norm
        if self.scheduler is not None:
            stats["lr"] = self.optimizer.param_groups[0]["lr"]
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()
        return stats

    def _start(self) -> int:
        """Resume (every rank from ``latest.pth``), check that all ranks agree, and give every
        rank rank 0's weights, as DDP does; returns the first epoch to train.

        Raises:
            RuntimeError: ranks resume at different epochs (no shared output dir).
        """
        start = self._resume()
        first = dist_util.broadcast_object(start)
        if start != first:
            raise RuntimeError(
                f"rank {self.rank} resumes {self.output_dir} at epoch {start}, rank 0 at epoch {first}: "
                "every node must see the same output dir (a shared file system)")
        for module in (self.model, self.objective):
            if isinstance(module, nn.Module):
                dist_util.broadcast_state(module)
        return start

    def _train_mode(self, train: bool) -> None:
        for module in (self.model, self.objective):
            if isinstance(module, nn.Module):
                module.train(train)

    def _train_epoch(self, epoch: int, writer: Any, global_step: int,
                     steps_per_epoch: Optional[int]) -> Tuple[Dict[str, float], int]:
        """The updates of one epoch, with a progress line (rate, ETA) every ``log_interval``
        steps; returns the mean of each stat over the steps that report it, and the number
        of steps (batches).

        Raises:
            FloatingPointError: a non-finite loss (naming the epoch and step).
            RuntimeError: the loader yielded no batch.
        """
        if self.epoch_start is not None:
            self.epoch_start(epoch)
        self._train_mode(True)
        sums: Dict[str, float] = {}
        counts: Dict[str, int] = {}
        n, t0 = 0, time.time()
        loader = self.train_loader(epoch)
        known = len(loader) if hasattr(loader, "__len__") else None  # epoch_loader's DataLoaders know it
        steps_per_epoch = known or steps_per_epoch
        self.optimizer.zero_grad(set_to_none=True)
        pending = 0
        for batch in loader:
            n += 1
            for inner in range(self.updates_per_batch):  # several: PPO's epochs over one batch of samples
                try:
                    stats = self._backward(batch)
                except FloatingPointError as e:
                    raise FloatingPointError(f"epoch {epoch} step {n}: {e}") from None
                pending += 1
                if pending == self.accum_grad or (n == known and inner == self.updates_per_batch - 1):
                    stats.update(self._update(pending))
                    pending = 0
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                    counts[k] = counts.get(k, 0) + 1
                    if writer is not None:
                        writer.add_scalar(f"train/{k}", float(v), global_step + n)
            if n % self.log_interval == 0 or n == steps_per_epoch:
                rate = n / max(time.time() - t0, 1e-9)
                total = steps_per_epoch or n
                left = (total - n) + total * (self.max_epoch - epoch)
                means = " ".join(f"{k}={v / counts[k]:.4g}" for k, v in sums.items())
                eta = _fmt_time(left / rate) if steps_per_epoch else "?"
                logging.info(
                    "epoch %d/%d step %d/%s %s | %.2f steps/s, ETA %s",
                    epoch, self.max_epoch, n, steps_per_epoch or "?", means, rate, eta,
                )
        if n == 0:
            raise RuntimeError(f"epoch {epoch}: the train loader yielded no batch")
        if pending:  # a loader without a length: its last window
            self._update(pending)
        return {k: v / counts[k] for k, v in sums.items()}, n

    def _end_epoch(self, epoch: int, means: Dict[str, float], n: int, train_time: float, writer: Any) -> None:
        """Validate (rank 0), record the epoch in the history on every rank, log it, and save."""
        self._train_mode(False)
        record = {"epoch": epoch, "steps": n, "train_time_s": round(train_time, 2)}
        record.update({f"train_{k}": v for k, v in means.items()})
        if self.rank == 0:
            with torch.no_grad():
                valid = self.validate(self.model)
            record.update({f"valid_{k}": float(v) for k, v in valid.items()})
            for k, v in valid.items():
                writer.add_scalar(f"valid/{k}", float(v), epoch)
        record = dist_util.broadcast_object(record)
        self.history.append(record)
        times = [h["train_time_s"] for h in self.history if "train_time_s" in h]
        logging.info(
            "epoch %d/%d done in %s: %s | ETA %s",
            epoch, self.max_epoch, _fmt_time(train_time),
            " ".join(f"{k}={v:.4g}" for k, v in record.items()
                     if k.startswith(("train_", "valid_")) and k != "train_time_s"),
            _fmt_time((self.max_epoch - epoch) * sum(times) / max(len(times), 1)),
        )
        if self.rank == 0:
            self._save(epoch)
        dist_util.barrier()

    def _environment(self) -> Dict[str, Any]:
        """This process's ``env.yaml`` mapping (:func:`captionlib.utils.provenance.environment`),
        the device named as ``cpu``, the GPU's name, or ``N x ...`` under N ranks."""
        device = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else self.device.type
        return environment(f"{self.world_size} x {device}" if self.world_size > 1 else device)

    def _run(self) -> List[Dict[str, float]]:
        from torch.utils.tensorboard import SummaryWriter

        start = self._start()
        if start > self.max_epoch:
            logging.info("%s: all %d epochs already done", self.output_dir, self.max_epoch)
            return self.history
        writer = SummaryWriter(str(self.output_dir / "tensorboard")) if self.rank == 0 else None
        global_step = sum(int(h.get("steps", 0)) for h in self.history)
        steps_per_epoch = None
        for epoch in range(start, self.max_epoch + 1):
            t0 = time.time()
            means, steps_per_epoch = self._train_epoch(epoch, writer, global_step, steps_per_epoch)
            global_step += steps_per_epoch
            self._end_epoch(epoch, means, steps_per_epoch, time.time() - t0, writer)
            if epoch == start and self.rank == 0:  # the epochs it saved are this environment's
                write_environment(self.output_dir, self._environment(), resuming=start > 1)
        if writer is not None:
            writer.close()
        first, last = self.history[0], self.history[-1]
        for key in ("train_loss", "train_reward"):
            if key in first and key in last:
                logging.info(
                    "%s: epoch %d %.4g -> epoch %d %.4g", key, first["epoch"], first[key], last["epoch"], last[key]
                )
        return self.history

