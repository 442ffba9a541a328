"""The data order contract: every launcher's replicas together see exactly the global batches a
single device sees, in the same order, with disjoint shares and equal step counts."""
import numpy as np
import pytest

from tf_recipes.data import DataError, InputShard, epoch_order, sharded_order, steps_per_epoch


def global_batches(num_examples, global_batch, total_steps, seed, pipelines, replicas_per_pipeline, start=0):
    """Rebuild, from the sharded orders, the set of examples every step trains on."""
    per_replica = global_batch // (pipelines * replicas_per_pipeline)
    steps = []
    orders = [sharded_order(num_examples, InputShard(pipelines, p, per_replica, global_batch), total_steps, seed, start)
              for p in range(pipelines)]
    per_pipeline_step = global_batch // pipelines
    for step in range(total_steps - start):
        members = []
        for order in orders:
            members.extend(order[step * per_pipeline_step:(step + 1) * per_pipeline_step])
        steps.append(sorted(members))
    return steps


@pytest.mark.parametrize("pipelines,replicas_per_pipeline", [(2, 1), (1, 2), (4, 2), (8, 1)])
def test_replicas_see_the_single_device_batches(pipelines, replicas_per_pipeline):
    single = global_batches(1000, 64, 40, seed=3, pipelines=1, replicas_per_pipeline=1)
    split = global_batches(1000, 64, 40, seed=3, pipelines=pipelines, replicas_per_pipeline=replicas_per_pipeline)
    assert split == single


def test_shards_are_disjoint_and_cover_each_epoch():
    shards = [sharded_order(100, InputShard(4, p, 5, 20), total_steps=5, seed=1) for p in range(4)]
    assert all(len(s) == 25 for s in shards)
    combined = np.concatenate(shards)
    assert sorted(combined) == list(range(100))


def test_every_pipeline_gets_the_same_number_of_examples_when_data_does_not_divide():
    # 103 examples, global batch 8: 12 whole batches per epoch; 7 examples wait for the next epoch.
    shards = [sharded_order(103, InputShard(2, p, 4, 8), total_steps=30, seed=0) for p in range(2)]
    assert len(shards[0]) == len(shards[1]) == 30 * 4


def test_epochs_reshuffle_and_resume_continues_the_same_stream():
    assert not np.array_equal(epoch_order(50, 10, 0, seed=5), epoch_order(50, 10, 1, seed=5))
    shard = InputShard(2, 1, 5, 10)
    whole = sharded_order(50, shard, total_steps=12, seed=5)
    resumed = sharded_order(50, shard, total_steps=12, seed=5, start_step=7)
    assert np.array_equal(whole[7 * 5:], resumed)


def test_too_little_data_for_one_batch_is_a_clear_error():
    with pytest.raises(DataError, match="lower --batch-size"):
        steps_per_epoch(10, 64)


def test_global_batch_must_divide_over_pipelines():
    with pytest.raises(ValueError, match="does not divide"):
        InputShard(3, 0, 4, 10)


def replica_batches(num_examples, global_batch, steps, seed, pipelines, replicas_per_pipeline):
    """What every replica of the job trains on at every step, keyed by its global replica index.
    A pipeline's batches go to its local replicas in turn (as tf.distribute and Horovod feed them)."""
    per_replica = global_batch // (pipelines * replicas_per_pipeline)
    batches = {}
    for p in range(pipelines):
        order = sharded_order(num_examples, InputShard(pipelines, p, per_replica, global_batch), steps, seed)
        for k, start in enumerate(range(0, len(order), per_replica)):
            replica = p * replicas_per_pipeline + k % replicas_per_pipeline
            batches.setdefault(replica, []).append(sorted(order[start:start + per_replica]))
    return batches


@pytest.mark.parametrize("layouts", [[(1, 2), (2, 1)], [(1, 4), (2, 2), (4, 1)], [(1, 8), (2, 4), (8, 1)]])
def test_each_replica_gets_the_same_examples_on_every_layout(layouts):
    # Batch norm computes statistics per replica: one process with N devices and N processes with
    # one device each must put the same examples on replica r, or they train different models.
    runs = [replica_batches(800, 32, 12, 7, pipelines, local) for pipelines, local in layouts]
    assert all(run == runs[0] for run in runs[1:])
