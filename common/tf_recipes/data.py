"""Deterministic example order, sharded before any expensive work.

Every launcher must see the same global batches in the same order, or it trains a different model.
The rule used here: shuffle the *indices* of the examples (or the file list) with a seed per epoch,
keep only whole global batches, then split every global batch into contiguous per-replica slices:
replica r of the job gets positions [r*b, (r+1)*b) of each global batch (b = per-replica batch), and
input pipeline p, which feeds the replicas p*L .. p*L+L-1, gets their slices in that order.

So the replicas of step i together hold exactly global batch i, and each replica holds the *same*
examples whether the job is one process with N local replicas, N processes with one each, or any mix.
That matters beyond the mean gradient: batch normalisation computes its statistics per replica.
Only integers are shuffled and sharded; decoding happens afterwards, on this pipeline's share only.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

import numpy as np

from tf_recipes.contract import UserError


class DataError(UserError, ValueError):
    """Bad or missing data, with a message that says what to do."""


DOWNLOAD_HOST = "storage.googleapis.com"  # where TFDS and Keras download from (faults can point it elsewhere)


def cannot_download(timeout_s: float = 5.0) -> str | None:
    """ "HOST cannot be reached" when a download cannot start (no proxy, and DOWNLOAD_HOST does not answer on
    443 at once: the downloaders would retry for minutes), else None."""
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    try:
        socket.create_connection((DOWNLOAD_HOST, 443), timeout=timeout_s).close()
    except OSError:
        return f"{DOWNLOAD_HOST} cannot be reached"


def download_tfds(builder, missing: str, size: str = "") -> None:
    """Downloads and prepares a TFDS builder, or raises DataError(missing) with its {} saying why it
    cannot."""
    if offline := cannot_download():
        raise DataError(missing.format(f"{offline} to download it{size}"))
    try:
        builder.download_and_prepare()
    except Exception as error:  # network or proxy failure halfway, a corrupt partial download
        raise DataError(missing.format(f"the download failed ({type(error).__name__}: {error})")) from None


def error_reason(error: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, without TF's decorations, for a one-line DataError."""
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    text = re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:[^\]]*\]", "", text).strip()
    return (text.splitlines() or [""])[0][:limit]


def check_labels(labels, num_classes: int, where: str, remedy: str) -> None:
    """DataError naming the first label outside 0..num_classes-1 in `where`, and what to do (such a label
    fails mid-step on the CPU naming no example, and gives a NaN loss on a GPU)."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(
            f"{where}: labels must be a 1-D integer array, got {labels.dtype} of shape "
            f"{labels.shape}; {remedy}"
        )
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if len(bad):
        values = np.unique(labels[bad])[:5].tolist()
        raise DataError(
            f"{where}: {len(bad)} of {len(labels)} labels are outside the model's classes "
            f"0..{num_classes - 1}, e.g. label {int(labels[bad[0]])} of example {int(bad[0])} "
            f"(values {values}); {remedy}"
        )


@dataclass(frozen=True)
class InputShard:
    """Which share of the data one input pipeline reads, and how it batches it."""

    # Distributed: the job's input pipelines, and which one this is
    num_pipelines: int  # input pipelines in the job: 1 per worker process
    pipeline_id: int  # this pipeline's index, 0 .. num_pipelines-1
    per_replica_batch: int  # batch size of one replica (what this pipeline's batches hold)
    global_batch: int  # per_replica_batch x replicas in the whole job

    def __post_init__(self):
        if not 0 <= self.pipeline_id < self.num_pipelines:
            raise ValueError(f"pipeline_id {self.pipeline_id} outside 0..{self.num_pipelines - 1}")
        if self.global_batch % self.num_pipelines:  # Distributed: whole slices for every pipeline
            raise ValueError(
                f"global batch {self.global_batch} does not divide over {self.num_pipelines} pipelines"
            )


def steps_per_epoch(num_examples: int, global_batch: int) -> int:
    """Whole global batches in one pass over the data; the remainder is left out of that epoch."""
    steps = num_examples // global_batch
    if steps == 0:
        raise DataError(
            f"{num_examples} examples do not fill one global batch of {global_batch}; "
            "lower --batch-size or use fewer replicas"
        )
    return steps


def epoch_order(
    num_examples: int, global_batch: int, epoch: int, seed: int, shuffle: bool = True
) -> np.ndarray:
    """All example indices of one epoch in training order, cut to whole global batches."""
    order = np.arange(num_examples, dtype=np.int64)
    if shuffle:
        np.random.default_rng([seed, epoch]).shuffle(order)
    return order[: steps_per_epoch(num_examples, global_batch) * global_batch]


def global_order(
    num_examples: int,
    global_batch: int,
    total_steps: int,
    seed: int,
    start_step: int = 0,
    shuffle: bool = True,
) -> np.ndarray:
    """Every example index the job trains on in global steps [start_step, total_steps), in order."""
    per_epoch = steps_per_epoch(num_examples, global_batch)
    parts = []
    for epoch in range(start_step // per_epoch, -(-total_steps // per_epoch)):
        order = epoch_order(num_examples, global_batch, epoch, seed, shuffle)
        first = max(start_step - epoch * per_epoch, 0)
        last = min(total_steps - epoch * per_epoch, per_epoch)
        parts.append(order[first * global_batch : last * global_batch])
    return np.concatenate(parts) if parts else np.zeros([0], np.int64)


def pipeline_positions(shard: InputShard, num_positions: int) -> np.ndarray:
    """Which positions of the global stream (of `num_positions`) this pipeline reads, in order."""
    share = shard.global_batch // shard.num_pipelines  # contiguous: this pipeline's replicas' slices
    positions = np.arange(num_positions, dtype=np.int64).reshape(-1, shard.num_pipelines, share)
    # Distributed: this pipeline's slice of each global batch
    return positions[:, shard.pipeline_id, :].reshape(-1)


def sharded_order(
    num_examples: int,
    shard: InputShard,
    total_steps: int,
    seed: int,
    start_step: int = 0,
    shuffle: bool = True,
) -> np.ndarray:
    """This pipeline's example indices for global steps [start_step, total_steps), in order: the same count
    on every pipeline, so no worker waits on a collective another never joins."""
    order = global_order(num_examples, shard.global_batch, total_steps, seed, start_step, shuffle)
    return order[pipeline_positions(shard, len(order))]  # Distributed: the shard, cut from the global order


def eval_share(num_examples: int, num_pipelines: int, pipeline_id: int) -> slice:
    """Pipeline `pipeline_id`'s contiguous share of an evaluation set of `num_examples`: the shares cover
    every example once and differ in size by at most one."""
    if num_examples < num_pipelines:
        raise DataError(
            f"the evaluation set has {num_examples} examples, fewer than the {num_pipelines} "
            "processes that share it; evaluate on more examples or with fewer processes"
        )
    # Distributed: this process's share of the evaluation set
    return slice(
        pipeline_id * num_examples // num_pipelines, (pipeline_id + 1) * num_examples // num_pipelines
    )
