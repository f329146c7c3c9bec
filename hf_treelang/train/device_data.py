"""The training set on the device: shuffling, batching and the single-leaf masking there, from seeded streams.

A run's training set (P sequences of 2**ℓ leaves: 2**18 × 16 symbols at the paper's MLM size) is tiny, so it lives
on the accelerator as one tensor, and an epoch is materialised there in one go: the rows in the epoch's order, each
with its masked leaf (MLM) or its root label (root classification). A step then reads a slice (a view: no kernel, no
host work), and there is no DataLoader, collator or worker in the hot loop.

The random stream (one home: :func:`epoch_generator`). Epoch ``e`` of a run with model seed ``seed`` draws, from a
CPU generator seeded with ``(seed, EPOCH_STREAM_TAG, e)``,

1. the order of the P training rows, ``torch.randperm(P)``;
2. the masked leaf of every row served in that order, :func:`hf_treelang.core.masking.training_positions`;
3. with ``mask_rate``, the Bernoulli draws of every leaf (the rule of
   :func:`hf_treelang.core.masking.mask_training_batch`, shared with the collator), at each row's rate when the rate
   falls over the run (``mask_rate_final``: a row's step is its place in the epoch's order);
4. with block masking, each row's block (steps 2-4 are all drawn by
   :meth:`hf_treelang.core.masking.TrainingMasking.draw`, the one home of these draws);

then moves the epoch to the device (a few hundred kilobytes once per epoch). A run with a σ curriculum
(:class:`hf_treelang.train.data.SigmaCurriculum`) serves its first E epochs from that epoch's own draw of P trees
instead of the training set, in the same order and with the same masks (the draw is a function of the run's data
and the epoch). Next-leaf prediction (``"clm"``) draws the order only: its inputs are the rows shifted behind BOS
(:func:`hf_treelang.core.oracle.next_leaf_inputs`), its labels the rows themselves. Why on the CPU: the draws are
then the same bytes on every device, so a run on a GPU and on the CPU see the same batches, and the generator of
epoch ``e`` is a function of (seed, e) alone, so resuming at any step re-creates every generator exactly (nothing to
save).

Ensembles: :class:`TrainingStream` holds N members' training sets, each with its own seed; member ``i`` is served
exactly the batches that a single run with ``seed_i`` and that training set is served (:meth:`TrainingStream.single`).

Glossary: ``N`` members, ``P`` training sequences, ``B`` batch, ``T = 2**ℓ`` leaves (``s**ℓ`` for a tree of
arity s), ``q`` symbols (mask id q).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from hf_treelang.core.masking import TrainingDraws, TrainingMasking, check_block_masking, mask_training_batch
from hf_treelang.core.oracle import next_leaf_inputs
from hf_treelang.core.params import check_int, check_param

EPOCH_STREAM_TAG = 0x7E90  # the training order and masks: never shared with the trees', the evaluation masks' streams
TASKS = ("mlm", "root", "clm")


def to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    """``tensor`` (drawn on the CPU) on ``device``; to a GPU through pinned memory without blocking the host, so that
    an epoch's plan is copied while the previous steps still run."""
    device = torch.device(device)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The CPU generator of epoch ``epoch`` of a run with model seed ``seed`` (order, then masks).

    Example:
        >>> torch.randperm(6, generator=epoch_generator(seed=0, epoch=0)).tolist()
        [0, 5, 4, 1, 3, 2]
    """
    seed = check_int("seed", seed, 0)
    epoch = check_int("epoch", epoch, 0)
    state = np.random.SeedSequence([seed, EPOCH_STREAM_TAG, epoch]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed((int(state[0]) << 31) ^ int(state[1]))  # < 2**63


def steps_per_epoch(num_train: int, global_batch: int, drop_last: bool = False) -> int:
    """Optimiser steps of one epoch over ``num_train`` sequences in steps of ``global_batch`` rows (all processes)."""
    return num_train // global_batch if drop_last else math.ceil(num_train / global_batch)


def optimizer_steps(training_args, num_train: int) -> int:
    """The optimiser steps of a run, as the Trainer counts them: ``max_steps`` when > 0, else
    ``ceil(num_train_epochs x steps per epoch)``; ``training_args`` is a ``TrainingArguments``."""
    return run_steps(training_args.max_steps, training_args.num_train_epochs,
                     training_args.per_device_train_batch_size * max(training_args.world_size, 1), num_train,
                     training_args.dataloader_drop_last)


def run_steps(max_steps: int | None, num_train_epochs: float, global_batch: int, num_train: int,
              drop_last: bool = False) -> int:
    """:func:`optimizer_steps` from the values it reads: ``max_steps`` when > 0, else ``ceil(num_train_epochs x
    steps per epoch)``."""
    if max_steps is not None and max_steps > 0:
        return int(max_steps)
    per_epoch = steps_per_epoch(num_train, global_batch, drop_last)
    return math.ceil(num_train_epochs * max(per_epoch, 1))

@dataclass
class EpochBatches:
    """One epoch on the device: ``inputs`` (N, n, T), ``labels`` (N, n) roots or (N, n, T) leaves, where n is
    the number of rows served (``steps * batch`` for this process); :meth:`batch` is step ``s``'s slice (a view).
    With ``stacked=False`` (a single run) the member axis is absent: (n, T) and (n,) or (n, T)."""

    inputs: torch.Tensor
    labels: torch.Tensor
    batch_size: int
    steps: int
    stacked: bool = True

    def batch(self, step: int) -> dict:
        rows = slice(step * self.batch_size, (step + 1) * self.batch_size)
        if self.stacked:
            return {"input_ids": self.inputs[:, rows], "labels": self.labels[:, rows]}  # (N, b, T), (N, b[, T])
        return {"input_ids": self.inputs[rows], "labels": self.labels[rows]}  # (b, T), (b[, T])


class TrainingStream:
    """The training sets of N runs (or one) on ``device``, served in per-epoch seeded order with on-device masking.

    Args:
        task: ``"mlm"`` (one masked leaf per sequence, or ``mask_rate``), ``"root"`` (labels are the roots) or
            ``"clm"`` (inputs ``[BOS, x_0 .. x_{T-2}]``, labels the leaves).
        leaves: (N, P, T) or (P, T) integer symbols in [0, q): the training sequences of each member (T = s**ℓ).
        roots: (N, P) or (P,) root symbols (root task; ignored for MLM).
        seeds: the N model seeds (each member's order and masks come from :func:`epoch_generator`).
        num_symbols: q; the mask id is q.
        batch_size: B, rows per step and process.
        mask_rate: None (one masked leaf per sequence, the paper) or a rate in (0, 1] (MLM only).
        masking: the whole training-mask rule (:class:`~hf_treelang.core.masking.TrainingMasking`: a falling rate,
            block masks), instead of ``mask_rate`` (MLM only); its ``total_steps`` are the run's optimiser steps.
        curricula: None, or one σ curriculum (or None) per member: an object with ``epochs`` and
            ``training_set(epoch)`` (``leaves`` (P, T), ``roots`` (P,)) whose epochs e < ``epochs`` are served from
            that set instead of ``leaves`` (:class:`hf_treelang.train.data.SigmaCurriculum`).
        drop_last: drop the last incomplete batch of an epoch (``TrainingArguments.dataloader_drop_last``).
        device: where the sets and batches live.
        world_size, process_index: data parallelism: a step serves ``world_size * B`` rows of the epoch's order and
            this process takes rows ``[process_index * B, (process_index + 1) * B)`` of them; the last step of an
            epoch is filled from the start of the order, so every process has a full batch (as accelerate's
            ``even_batches``).
        arity: s, the children of every node of the data's trees (2 for the paper's grammars): T = s**depth.

    Every value is checked here, before anything is moved: symbols in [0, q), roots in [0, q), sizes.
    """

    def __init__(self, task: str, leaves, roots=None, *, seeds, num_symbols: int, batch_size: int,
                 mask_rate: float | None = None, masking: TrainingMasking | None = None, curricula=None,
                 drop_last: bool = False, device="cpu", world_size: int = 1, process_index: int = 0, arity: int = 2):
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        leaves = torch.as_tensor(np.asarray(leaves), dtype=torch.int64)
        if leaves.dim() == 2:
            leaves = leaves.unsqueeze(0)
        seeds = [int(seed) for seed in np.atleast_1d(np.asarray(seeds))]
        if leaves.dim() != 3 or leaves.shape[0] != len(seeds):
            raise ValueError(f"`leaves` must have shape (members, num_train, s**depth) with one seed per member "
                             f"({len(seeds)} seeds), got {tuple(leaves.shape)}")
        for seed in seeds:
            check_param("seed", seed)
        q = check_param("num_symbols", num_symbols)
        N, P, T = leaves.shape
        arity = check_param("arity", arity)
        if not any(arity**depth == T for depth in range(1, T.bit_length())):
            raise ValueError(f"`leaves` must have {arity}**depth columns (depth >= 1; arity = {arity}), got {T}")
        check_int("num_train", P, 1)
        if leaves.numel() and (int(leaves.min()) < 0 or int(leaves.max()) >= q):
            raise ValueError(f"`leaves` must hold symbols in [0, q) = [0, {q}), got values in "
                             f"[{int(leaves.min())}, {int(leaves.max())}]")
        if task == "root":
            if roots is None:
                raise ValueError("the root task needs `roots`, got None")
            roots = torch.as_tensor(np.asarray(roots), dtype=torch.int64).reshape(N, -1)
            if roots.shape != (N, P):
                raise ValueError(f"`roots` must have shape (members, num_train) = {(N, P)}, got {tuple(roots.shape)}")
            if int(roots.min()) < 0 or int(roots.max()) >= q:
                raise ValueError(f"`roots` must hold symbols in [0, q) = [0, {q}), got values in "
                                 f"[{int(roots.min())}, {int(roots.max())}]")
        if mask_rate is not None and masking is not None:
            raise ValueError(f"give `mask_rate` ({mask_rate!r}) or `masking` (which holds its mask_rate), not both")
        masking = masking if masking is not None else TrainingMasking(mask_rate)  # 0: the single random leaf
        if task != "mlm" and masking != TrainingMasking():
            raise ValueError(f"`mask_rate` and the other training-mask options are only used by the MLM task, got "
                             f"{masking!r} for task {task!r}")
        if masking.block_fraction and arity != 2:
            raise ValueError(f"block masks are aligned blocks of a binary tree's 2**depth leaves, got arity {arity}")
        check_block_masking(masking.block_fraction, masking.block_sizes, T.bit_length() - 1)
        curricula = [None] * N if curricula is None else list(curricula)
        if len(curricula) != N:
            raise ValueError(f"`curricula` must hold one curriculum (or None) per member ({N}), got {len(curricula)}")
        self.task = task
        self.seeds = seeds
        self.num_symbols = q
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.masking = masking
        self.mask_rate = masking.mask_rate
        self.curricula = curricula
        self.drop_last = bool(drop_last)
        self.world_size = check_int("world_size", world_size, 1)
        self.process_index = check_int("process_index", process_index, 0, self.world_size - 1)
        self.device = torch.device(device)
        self.num_members, self.num_train, self.num_leaves = N, P, T
        global_batch = self.batch_size * self.world_size
        if self.drop_last and P < global_batch:
            raise ValueError(f"`num_train` = {P} is smaller than one batch ({global_batch} rows) with drop_last")
        self.steps_per_epoch = steps_per_epoch(P, global_batch, self.drop_last)
        self.leaves = leaves.to(self.device)  # (N, P, T)
        self.roots = roots.to(self.device) if task == "root" else None  # (N, P)

    def __len__(self) -> int:
        """Optimiser steps per epoch."""
        return self.steps_per_epoch

    def epoch_plan(self, member: int, epoch: int) -> tuple:
        """(order (n,), the mask draws or None) of one member's epoch, on the CPU, for the n rows all processes serve
        in it (:class:`~hf_treelang.core.masking.TrainingDraws`: positions (n,), Bernoulli draws and blocks (n, T))."""
        generator = epoch_generator(self.seeds[member], epoch)
        order = torch.randperm(self.num_train, generator=generator)  # (P,)
        served = self.steps_per_epoch * self.batch_size * self.world_size
        if self.world_size > 1 and served > self.num_train:
            order = torch.cat([order, order[: served - self.num_train]])  # fill the last step from the start
        order = order[:served] if self.drop_last or self.world_size > 1 else order  # (n,)
        if self.task != "mlm":
            return order, None
        # row i of the order is served at step epoch * steps_per_epoch + i // (world_size * B)
        steps = epoch * self.steps_per_epoch + torch.arange(order.shape[0]) // (self.batch_size * self.world_size)
        return order, self.masking.draw(order.shape[0], self.num_leaves, generator, steps)  # (n,), (n, T)

    def epoch(self, epoch: int) -> EpochBatches:
        """Epoch ``epoch`` of every member on the device, this process's rows only."""
        inputs, labels = [], []
        for member in range(self.num_members):
            order, draws = self._local_rows(*self.epoch_plan(member, epoch))
            order = to_device(order, self.device)  # (n,)
            leaves, roots = self.training_set(member, epoch)  # (P, T), (P,) or None
            rows = leaves[order]  # (n, T)
            if self.task == "root":
                inputs.append(rows)
                labels.append(roots[order])  # (n,)
                continue
            if self.task == "clm":
                inputs.append(next_leaf_inputs(rows, self.num_symbols))  # (n, T): [BOS, x_0 .. x_{T-2}]
                labels.append(rows)  # (n, T): position i predicts leaf i
                continue
            on_device = [None if d is None else to_device(d, self.device)
                         for d in (draws.positions, draws.draws, draws.blocks)]  # (n,), (n, T), (n, T)
            masked, target = mask_training_batch(rows, self.num_symbols, *on_device)
            inputs.append(masked)
            labels.append(target)
        return EpochBatches(torch.stack(inputs), torch.stack(labels), self.batch_size, self.steps_per_epoch)

    def training_set(self, member: int, epoch: int) -> tuple:
        """``(leaves (P, T), roots (P,) or None)`` on the device that member ``member`` trains on in epoch ``epoch``:
        its σ curriculum's draw of that epoch, or its training set."""
        curriculum = self.curricula[member]
        trees = curriculum.training_set(epoch) if curriculum is not None else None
        if trees is None:
            return self.leaves[member], None if self.roots is None else self.roots[member]
        leaves = torch.as_tensor(np.asarray(trees.leaves), dtype=torch.int64)  # (P, T)
        if leaves.shape != (self.num_train, self.num_leaves):
            raise ValueError(f"the σ curriculum's epoch {epoch} must hold (num_train, 2**depth) = "
                             f"{(self.num_train, self.num_leaves)} leaves, got {tuple(leaves.shape)}")
        roots = torch.as_tensor(np.asarray(trees.roots), dtype=torch.int64)  # (P,)
        return to_device(leaves, self.device), to_device(roots, self.device)

    def _local_rows(self, order, draws: TrainingDraws | None) -> tuple:
        """This process's share of the epoch: rows [r*B, (r+1)*B) of every step's world_size * B rows."""
        if self.world_size == 1:
            return order, draws
        B, W, r = self.batch_size, self.world_size, self.process_index
        index = (torch.arange(self.steps_per_epoch).unsqueeze(1) * (B * W) + r * B + torch.arange(B)).reshape(-1)
        if draws is not None:
            draws = TrainingDraws(*(None if d is None else d[index] for d in (draws.positions, draws.draws,
                                                                               draws.blocks)))
        return order[index], draws

    def single(self) -> "SingleRunView":
        """The batches of member 0 without the member axis, what a single run's Trainer is fed."""
        if self.num_members != 1:
            raise ValueError(f"a single run's stream has one member, this one has {self.num_members}")
        return SingleRunView(self)


class SingleRunView:
    """A one-member :class:`TrainingStream` whose batches have no member axis: ``input_ids`` (b, T)."""

    def __init__(self, stream: TrainingStream):
        self.stream = stream

    def __len__(self) -> int:
        return len(self.stream)

    def epoch(self, epoch: int) -> EpochBatches:
        batches = self.stream.epoch(epoch)
        return EpochBatches(batches.inputs[0], batches.labels[0], batches.batch_size, batches.steps, stacked=False)

    def __getattr__(self, name):
        return getattr(self.stream, name)


__all__ = ["EPOCH_STREAM_TAG", "EpochBatches", "SingleRunView", "TrainingStream", "epoch_generator",
           "optimizer_steps", "run_steps", "steps_per_epoch"]
