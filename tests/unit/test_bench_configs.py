"""The configs the benchmark compares, derived from the committed encoder config."""

from __future__ import annotations

from tools.bench.__main__ import model_analyzer_pick, without_batching
from tools.model_config import batching_problems, has_priority_queues, load_config
from tools.paths import MODEL_REPOSITORY


def test_model_analyzer_pick_is_the_default_batcher_on_one_instance_held_to_batches_of_8() -> None:
    base = load_config(MODEL_REPOSITORY / "encoder")
    pick = model_analyzer_pick(base, batch_floor=32)
    assert [group.count for group in pick.instance_group] == [1]
    threads = int(base.parameters["intra_op_thread_count"].string_value) * sum(g.count for g in base.instance_group)
    assert pick.parameters["intra_op_thread_count"].string_value == str(threads), "the one instance gets all the committed cores"
    assert pick.max_batch_size == 32 and list(pick.dynamic_batching.preferred_batch_size) == [8]
    assert pick.dynamic_batching.max_queue_delay_microseconds == 0
    assert not has_priority_queues(pick)
    assert batching_problems(pick) == []
    assert model_analyzer_pick(base, batch_floor=0).max_batch_size == 8


def test_without_batching_keeps_everything_but_the_batcher() -> None:
    base = load_config(MODEL_REPOSITORY / "encoder")
    plain = without_batching(base)
    assert not plain.HasField("dynamic_batching")
    assert plain.instance_group == base.instance_group and plain.max_batch_size == base.max_batch_size
