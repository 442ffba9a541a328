"""Checkpoint and resume: RESULTS/checkpoints holds the model, the optimizer (float16's loss scale
included), the step and the dropout layers' random state, and run.json the run's identity (what decides
the data order and the per-replica state). --resume continues only a run of the same identity, from no
step past its last; every process reads the same files, so all decide alike. A stop on a signal leaves
a checkpoint to resume from.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

import tensorflow as tf

from tf_recipes.config import amp_flags
from tf_recipes.contract import EXPORT_DIR, RESULT_FIELDS, RESULTS_FILE, RunFinished, StopRequested, UserError
from tf_recipes.launchers import Launcher
from tf_recipes.reporting import disk_full_is_one_line, log, nbytes, write_json
from tf_recipes.stopping import StopFlag, stopped_marker

CHECKPOINTS_DIR = "checkpoints"  # RESULTS/checkpoints
IDENTITY_FILE = "run.json"  # RESULTS/checkpoints/run.json: the identity of the run that wrote them


class ResumeError(UserError, ValueError):
    """--resume cannot continue the checkpointed run exactly; the message names what differs."""


def identity_mismatch(saved: dict, identity: dict, latest: str) -> str | None:
    """Why a run of `identity` cannot resume checkpoint `latest`, written by a run of `saved`; None
    when it can. A run.json written before the precision was recorded leaves the precision out."""
    if "precision" not in saved:
        identity = {key: value for key, value in identity.items() if key != "precision"}
    differ = [key for key, value in identity.items() if saved.get(key) != value]
    if not differ:
        return None
    reasons, remedies = [], []
    if set(differ) - {"precision"}:
        reasons.append("the data order and the per-replica state would not match its step count")
        remedies.append("the same --batch-size, replica count, --seed and data")
    if "precision" in differ:  # float16's loss scale lives in the optimizer state, and not in the others'
        reasons.append(
            "the arithmetic and the optimizer state (float16's loss scale) differ between precisions"
        )
        remedies.append(
            f"its precision ({amp_flags(saved['precision'])}; a bare --amp is float16 only on a GPU)"
        )
    return (
        f"--resume: {latest} was written by a run with other settings "
        f"({'; '.join(f'{key} {saved.get(key)} -> {identity[key]}' for key in differ)}); "
        f"{' and '.join(reasons)}. Resume with {' and '.join(remedies)}, or start over in another "
        "--results-dir"
    )


def results_complete(path: str, steps: int, target=None) -> bool:
    """`path` is a whole results.json of a run that ended at `steps`; with `target`, one that ended
    there because it reached that --target."""
    try:
        with open(path) as handle:
            results = json.load(handle)
    except (OSError, ValueError):
        return False
    if not isinstance(results, dict) or not RESULT_FIELDS <= results.keys() or results.get("steps") != steps:
        return False
    return target is None or (results.get("target") == str(target) and results.get("target_step") == steps)


def listed_checkpoints(folder: str) -> list[str]:
    """The checkpoints in `folder` found by listing its files (ckpt-N with its .index), newest first."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    named = (re.fullmatch(r"ckpt-(\d+)\.index", name) for name in names)
    steps = sorted((int(match[1]) for match in named if match), reverse=True)
    return [os.path.join(folder, f"ckpt-{step}") for step in steps]


def state_checkpoint(folder: str) -> str | None:
    """The newest checkpoint as `folder`'s state file names it; None when it names none, or cannot be read
    (TensorFlow returns None for a torn file and raises for an empty one)."""
    try:
        return tf.train.latest_checkpoint(folder)
    except Exception:  # ValueError, OpError, a protobuf DecodeError: every way a state file fails to parse
        return None


def exported_since(results_dir: str, since: float) -> bool:
    """RESULTS/export holds a whole version (its saved_model.pb: a version appears whole or not at all)
    written at or after `since`, a time from os.path.getmtime."""
    base = os.path.join(results_dir, EXPORT_DIR)
    try:
        versions = [name for name in os.listdir(base) if name.isdigit()]
    except OSError:
        return False
    paths = (os.path.join(base, version, "saved_model.pb") for version in versions)
    return any(os.path.isfile(path) and os.path.getmtime(path) >= since for path in paths)


def hold_results_dir(results_dir: str) -> int:
    """A descriptor of the folder RESULTS, locked (flock) for as long as this process lives: the kernel
    releases it when the process ends, killed or not, and no file is written for it. A UserError naming the
    process that holds it, when another run does: two runs in one folder would overwrite each other's
    checkpoints, results and export."""
    import fcntl

    os.makedirs(results_dir, exist_ok=True)
    folder = os.open(results_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock_holder(os.fstat(folder).st_ino)
        os.close(folder)
        raise UserError(
            f"{results_dir} is in use by a run that is still going ({holder} holds its lock); "
            "wait for it to end, or choose another --results-dir"
        ) from None
    return folder


def lock_holder(inode: int) -> str:
    """'process PID' holding a lock on the file of `inode`, from /proc/locks (Linux), else 'another
    process'."""
    with contextlib.suppress(OSError), open("/proc/locks") as locks:
        for line in locks:
            fields = line.split()  # N: FLOCK ADVISORY WRITE PID MAJOR:MINOR:INODE START END
            if len(fields) > 5 and fields[5].rsplit(":", 1)[-1] == str(inode):
                return f"process {fields[4]}"
    return "another process"


class Checkpoints:
    """RESULTS/checkpoints of one run: check the resume target, restore, save, and stop with a
    checkpoint. `identity` is what a resumed run must match (Trainer.run_identity)."""

    def __init__(
        self,
        launcher: Launcher,
        results_dir: str,
        resume: bool,
        identity: dict,
        total_steps: int,
        export: bool,
        keep: int,  # checkpoints kept (RunConfig.keep_checkpoints)
    ):
        self.launcher, self.results_dir, self.resume, self.keep = launcher, results_dir, resume, keep
        # export: a finished run wrote results.json, the weights and (unless --no-export) the export
        self.identity, self.total_steps, self.export = identity, total_steps, export
        self.folder = os.path.join(results_dir, CHECKPOINTS_DIR)
        self.identity_path = os.path.join(self.folder, IDENTITY_FILE)
        self.checkpoint = None

    def check_resume_target(self, target=None) -> None:
        """--resume, before anything is built or written: refuse a checkpoint from other settings or past
        this run's last step; end a run that already finished (RunFinished), at its last step or where it
        reached `target` (this run's --target)."""
        if not self.resume or not (latest := self.latest()):
            return
        self._check_identity(latest)
        try:
            reached = int(tf.train.load_checkpoint(latest).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))
        except Exception:  # unreadable or foreign: restore names the problem
            return
        if reached > self.total_steps:
            raise ResumeError(
                f"--resume: {latest} is at step {reached}, past this run's last step {self.total_steps} "
                f"(--max-steps/--epochs); pass --max-steps {reached} or more (or enough --epochs) to "
                "continue it, or start over in another --results-dir"
            )
        results = os.path.join(self.results_dir, RESULTS_FILE)
        # Finished: at its last step, or where it reached this run's --target, with everything a run promises
        # written (results.json before the export: a run killed between them goes on to write the export)
        last = reached == self.total_steps
        finished = (last or target) and results_complete(results, reached, None if last else target)
        if finished and (not self.export or exported_since(self.results_dir, os.path.getmtime(results))):
            log(
                self.launcher,
                f"--resume: the run already finished at step {reached}; its results are in "
                f"{results}; nothing to do",
            )
            raise RunFinished(results)

    def latest(self) -> str | None:
        """The checkpoint to resume: the state file's, or when that file cannot be read while checkpoints are
        there, the newest found by listing. A damaged state file is never taken as "no checkpoint": that would
        start over and overwrite, then delete, the checkpoints it lost track of."""
        return state_checkpoint(self.folder) or next(iter(listed_checkpoints(self.folder)), None)

    def _check_identity(self, latest: str) -> None:
        """Refuse a resume that could not continue the same run (different data order or replicas)."""
        try:
            with open(self.identity_path) as handle:
                saved = json.load(handle)
        except (OSError, ValueError) as error:
            raise ResumeError(
                f"{self.identity_path} cannot be read ({error}), so {latest} cannot be resumed "
                "safely; start over in another --results-dir"
            ) from None
        if problem := identity_mismatch(saved, self.identity, latest):
            raise ResumeError(problem)

    def track(self, model, optimizer, step: tf.Variable) -> None:
        """What every checkpoint holds: the model, the optimizer (built) and the step."""
        # model.variables adds the dropout layers' random state, without which a resume draws other masks.
        self.checkpoint = tf.train.Checkpoint(
            model=model, optimizer=optimizer, step=step, model_state=list(model.variables)
        )

    def restore(self) -> int:
        """The step to start from: the latest checkpoint's under --resume (restored into the tracked
        model and optimizer), else 0. Without --resume, checkpoints already there are refused."""
        latest, listed = state_checkpoint(self.folder), listed_checkpoints(self.folder)
        if not self.resume and (latest or listed):
            raise FileExistsError(
                f"{self.folder} already holds checkpoints ({os.path.basename(latest or listed[0])}); "
                "pass --resume to continue that run, or choose another --results-dir"
            )
        if self.resume and not latest and listed:  # a damaged state file: the newest checkpoint that restores
            latest = self._restore_listed(listed)
        elif self.resume and latest:  # check_resume_target has checked its settings and step
            try:
                self.checkpoint.restore(latest).assert_existing_objects_matched()
            # a truncated or foreign file fails in many ways (OpError, IndexError, ...)
            except Exception as error:
                raise ResumeError(
                    f"checkpoint {latest} cannot be restored into this model ({type(error).__name__}: "
                    f"{str(error).strip().splitlines()[0][:300]}); resume with the model settings that "
                    "wrote it, delete it to fall back to the one before, or start over in another "
                    "--results-dir"
                ) from None
        elif self.resume:
            log(self.launcher, f"--resume: no checkpoint in {self.folder}, starting from step 0")
        start_step = int(self.checkpoint.step.numpy())  # the tracked step: 0 unless restored
        if latest:
            log(self.launcher, f"resumed from {latest} at step {start_step}")
        # Distributed: the chief removes the stop marker
        if self.resume and self.launcher.is_chief and os.path.exists(stopped_marker(self.results_dir)):
            os.remove(stopped_marker(self.results_dir))  # this run continues the stopped one
        return start_step

    def _restore_listed(self, listed: list[str]) -> str:
        """Restore the newest of `listed` that restores, say so in one line, and write the state file again
        from the listing (the chief), so that the checkpoint manager keeps and deletes what is there."""
        state_file = os.path.join(self.folder, "checkpoint")
        for candidate in listed:
            try:
                self.checkpoint.restore(candidate).assert_existing_objects_matched()
            except Exception:  # torn or foreign: the one before
                continue
            log(
                self.launcher,
                f"{state_file} cannot be read; resuming from {os.path.basename(candidate)}, the newest of "
                f"the {len(listed)} checkpoints listed in {self.folder} that restores",
            )
            if self.launcher.is_chief:  # Distributed: the chief writes the state file again
                # with their times, which mark them the manager's to delete (without, it keeps them forever)
                # (without those after it: they did not restore)
                oldest_first = list(reversed(listed[listed.index(candidate) :]))
                times = [os.path.getmtime(path + ".index") for path in oldest_first]
                tf.compat.v1.train.update_checkpoint_state(
                    self.folder,
                    candidate,
                    all_model_checkpoint_paths=oldest_first,
                    all_model_checkpoint_timestamps=times,
                    last_preserved_timestamp=min(times) - 1,
                )
            return candidate
        raise ResumeError(
            f"{state_file} cannot be read, and none of the {len(listed)} checkpoints listed in "
            f"{self.folder} restores into this model; start over in another --results-dir"
        )

    def save(self) -> None:
        """A checkpoint of the tracked step, and run.json beside it (the chief's copy is kept)."""
        launcher = self.launcher
        # Every worker saves (saving can involve the strategy's collectives); only the chief keeps its copy.
        # Distributed: only the chief keeps checkpoints
        if not launcher.is_chief and launcher.traits["collective"] != "strategy":
            return
        directory = self.folder
        # Strategy: a worker's throwaway checkpoint, in TensorFlow's in-memory file
        # system: nothing on disk, so a worker killed while it saves leaves nothing behind
        if not launcher.is_chief:
            directory = f"ram://tf-recipes-worker{launcher.worker_index}-{os.getpid()}-ckpt"
        manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=self.keep)
        needed = nbytes(self.checkpoint.model.variables) + nbytes(self.checkpoint.optimizer.variables)
        with disk_full_is_one_line(directory, needed, "a checkpoint"):
            if launcher.is_chief:  # Distributed: the chief writes run.json
                write_json(self.identity_path, self.identity)
            manager.save(checkpoint_number=int(self.checkpoint.step.numpy()))
        if not launcher.is_chief:  # Strategy: the throwaway checkpoint removed
            tf.io.gfile.rmtree(directory)

    def stop(self, step: int, stop_flag: StopFlag) -> None:
        """After the checkpoint of `step`: wait for every process, then leave with StopRequested."""
        # The marker is for whatever started the job: horovodrun reports only "status 1".
        # Distributed: the chief writes the stop marker
        if self.launcher.is_chief:
            marker = {"step": step, "total_steps": self.total_steps, "signal": stop_flag.signal_name}
            write_json(stopped_marker(self.results_dir), marker)
        # Nobody exits (and has a scheduler kill the rest) before the checkpoint is whole.
        self.launcher.barrier()  # Distributed: all stop together
        who = stop_flag.signal_name or "a peer was signalled"
        raise StopRequested(
            f"stopped at step {step} of {self.total_steps} ({who}); checkpoint in {self.folder}; continue "
            "with --resume",
            step,
        )
