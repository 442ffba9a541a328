"""The desync guard: at the end of fit, every replica's trainable weights, batch-norm statistics and
float16 loss scale must be bit-identical, or the run ends with DesyncError (exit contract.EXIT_DESYNC)
before a result is written. Losses can agree while weights drift; a run whose replicas drifted trained no
single model. The replicas' fingerprints and loss scales it gathers are results.json's
"replica_fingerprints" and "loss_scaling"."""

from __future__ import annotations

import keras

from tf_recipes.contract import DesyncError
from tf_recipes.launchers import Launcher, replica_copies
from tf_recipes.reporting import log, scales_loss


def check_replicas_agree(launcher: Launcher, model: keras.Model, optimizer, step: int):
    """(loss_scaling, fingerprints) of a run at `step`, once every replica agrees; else DesyncError."""
    trainable, drifting = replica_state(model)
    # Distributed: the loss scales must agree
    loss_scaling = gather_loss_scaling(launcher, optimizer, step)
    # Distributed: the weights must agree (the desync guard)
    return loss_scaling, agreed_fingerprints(launcher, trainable + drifting + loss_scale_state(optimizer))


def replica_state(model: keras.Model):
    """What must be identical on every replica: the trainable weights, and batch-norm statistics."""
    drifting = [v for v in model.non_trainable_variables if "float" in str(v.dtype)]
    return model.trainable_variables, drifting


def loss_scale_state(optimizer) -> list:
    """float16: the loss scale and its growth counter, which each replica updates on its own."""
    return [optimizer.dynamic_scale, optimizer.step_counter] if scales_loss(optimizer) else []


def gather_loss_scaling(launcher: Launcher, optimizer, step: int) -> dict | None:
    """float16: every replica's loss scale and steps skipped for overflow (results.json's "loss_scaling");
    DesyncError when two replicas differ."""
    if not scales_loss(optimizer):
        return None
    pairs = zip(replica_copies(optimizer.dynamic_scale), replica_copies(optimizer.iterations), strict=False)
    rows = [[float(scale.numpy()), step - int(applied.numpy())] for scale, applied in pairs]
    rows = launcher.gather_replica_rows(rows)  # Distributed: loss scales gathered from every replica
    scales, skipped = [row[0] for row in rows], [int(row[1]) for row in rows]
    if len(set(scales)) > 1 or len(set(skipped)) > 1:
        replicas = enumerate(zip(scales, skipped, strict=True))
        listing = ", ".join(f"replica {i}: {scale:g} ({count} skipped)" for i, (scale, count) in replicas)
        raise DesyncError(
            f"replicas finished with different loss scales or skipped steps ({listing}); they did not skip "
            "the same overflowed steps, so this run trained no single model; results were not written"
        )
    log(
        launcher,
        f"loss scale {scales[0]:g} on every replica; {skipped[0]} of {step} steps skipped for "
        "overflow on every replica",
    )
    settings = {"initial_scale": optimizer.initial_scale, "growth_steps": optimizer.dynamic_growth_steps}
    final = {"final_scale": scales[0], "skipped_steps": skipped[0]}
    return {**settings, **final, "replica_scales": scales, "replica_skipped_steps": skipped}


def agreed_fingerprints(launcher: Launcher, variables) -> list[str]:
    """Every replica's fingerprint of `variables`, on every process; DesyncError unless all are one."""
    fingerprints = launcher.all_fingerprints(variables)  # Distributed: desync guard's gather
    check_in_sync(fingerprints)
    log(
        launcher,
        f"replicas in sync: {len(fingerprints)} identical fingerprints of the weights, "
        f"any batch-norm statistics and any loss scale ({fingerprints[0]})",
    )
    return fingerprints


def check_in_sync(fingerprints: list[str]) -> None:
    """The desync guard: every replica must end with bit-identical trainable weights."""
    if len(set(fingerprints)) > 1:  # Distributed: the replicas must end as one model
        listing = ", ".join(f"replica {i}: {fp}" for i, fp in enumerate(fingerprints))
        raise DesyncError(
            f"replicas finished with different weights ({listing}). The launchers did not keep "
            "them in sync, so this run trained no single model; results were not written. "
            "Check the Keras version (>= 3.8 is required for MirroredStrategy) and the launcher."
        )
