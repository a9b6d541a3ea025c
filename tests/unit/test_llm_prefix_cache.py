"""Prefix caching: full KV blocks named by chained hashes, shared by reference count, evicted
LRU. Block size 4 throughout, so the expectations below are counted by hand."""

from __future__ import annotations

import random

import pytest

from llm.contract import SchedulerConfig
from llm.scheduler import BlockManager, RequestStatus
from llm.scheduler.block_manager import ROOT_HASH, block_hash, chain_hashes
from tests.unit.llm_fakes import reference_tokens
from tests.unit.test_llm_scheduler import Driver

CONFIG = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, long_prefill_token_threshold=64)
PREFIX = [11, 12, 13, 14, 15, 16, 17, 18]  # two full blocks


def first_chunk(driver: Driver, seq_id: int):
    return next(chunk for chunk in driver.executor.plans[-1] if chunk.seq_id == seq_id)


def assert_reference_outputs(driver: Driver) -> None:
    for seq in driver.seqs:
        assert seq.output_token_ids == reference_tokens(seq.token_ids[: seq.num_prompt_tokens], seq.request.params.max_tokens)


def test_a_block_hash_names_the_whole_prefix_not_only_the_block() -> None:
    first = block_hash(ROOT_HASH, [1, 2, 3, 4])
    assert block_hash(first, [5, 6, 7, 8]) != block_hash(block_hash(ROOT_HASH, [9, 9, 9, 9]), [5, 6, 7, 8])
    assert chain_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4, []) == [first, block_hash(first, [5, 6, 7, 8])]


def test_a_shared_prefix_skips_the_prefill_of_its_full_blocks() -> None:
    driver = Driver(CONFIG)
    first = driver.add([*PREFIX, 1, 2], max_tokens=6)
    driver.step()
    second = driver.add([*PREFIX, 3, 4, 5], max_tokens=6)
    plan = driver.step()
    chunk = first_chunk(driver, second.seq_id)
    assert chunk.start_position == 8 and list(chunk.token_ids) == [3, 4, 5]
    assert second.block_table[:2] == first.block_table[:2]
    assert [driver.scheduler.blocks.ref_count(b) for b in first.block_table[:2]] == [2, 2]
    assert (plan.prefix_cache_queries, plan.prefix_cache_hits) == (11, 8)
    driver.run()
    assert_reference_outputs(driver)


def test_a_partly_filled_block_is_not_shared() -> None:
    driver = Driver(CONFIG)
    driver.add([1, 2, 3, 4, 5, 6], max_tokens=1)  # block 1 holds 2 tokens when the prompt is computed
    driver.step()
    second = driver.add([1, 2, 3, 4, 5, 6, 7], max_tokens=1)
    driver.step()
    assert first_chunk(driver, second.seq_id).start_position == 4
    assert_reference_outputs(driver)


def test_the_last_prompt_token_is_computed_even_when_every_block_is_cached() -> None:
    driver = Driver(CONFIG)
    driver.add(list(PREFIX), max_tokens=3)
    driver.run()
    again = driver.add(list(PREFIX), max_tokens=3)
    plan = driver.step()
    chunk = first_chunk(driver, again.seq_id)
    assert chunk.start_position == 4 and list(chunk.token_ids) == PREFIX[4:] and chunk.sample
    assert plan.prefix_cache_hits == 4
    driver.run()
    assert_reference_outputs(driver)


def test_without_prefix_caching_nothing_is_shared_or_counted() -> None:
    driver = Driver(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, enable_prefix_caching=False))
    driver.add([*PREFIX, 1], max_tokens=2)
    driver.run()
    again = driver.add([*PREFIX, 1], max_tokens=2)
    plan = driver.step()
    assert first_chunk(driver, again.seq_id).start_position == 0
    assert (plan.prefix_cache_queries, plan.prefix_cache_hits) == (0, 0)
    assert driver.scheduler.blocks.num_cached == 0


def test_a_block_is_free_only_when_its_last_holder_lets_it_go_and_stays_cached() -> None:
    driver = Driver(CONFIG)
    first = driver.add([*PREFIX, 1], max_tokens=20)
    driver.step()
    second = driver.add([*PREFIX, 2], max_tokens=20)
    driver.step()
    blocks = driver.scheduler.blocks
    shared = first.block_table[:2]
    driver.scheduler.finish(first)
    assert [blocks.ref_count(b) for b in shared] == [1, 1] and second.block_table[:2] == shared
    driver.scheduler.finish(second)
    assert [blocks.ref_count(b) for b in shared] == [0, 0] and blocks.num_free == blocks.num_blocks
    assert blocks.lookup(chain_hashes([*PREFIX, 3], 4, []), 9) == shared


def test_a_cancelled_request_frees_only_the_blocks_it_does_not_share() -> None:
    driver = Driver(CONFIG)
    first = driver.add([*PREFIX, 1], max_tokens=20)
    driver.step()
    second = driver.add([*PREFIX, 2, 3, 4, 5, 6], max_tokens=20)  # 13 tokens: 2 shared blocks, 2 of its own
    driver.step()
    blocks = driver.scheduler.blocks
    used = blocks.num_used
    own = second.block_table[2:]
    assert len(own) == 2
    driver.scheduler.finish(second)  # what the loop does on a cancellation
    assert blocks.num_used == used - 2
    assert all(blocks.ref_count(b) == 0 for b in own) and all(blocks.ref_count(b) == 1 for b in first.block_table)
    driver.run()
    assert first.output_token_ids == reference_tokens([*PREFIX, 1], 20)


def test_free_cached_blocks_are_evicted_least_recently_freed_first_and_only_when_needed() -> None:
    blocks = BlockManager(num_blocks=4, block_size=4, prefix_caching=True)
    tables = {name: [] for name in "abc"}
    for offset, name in enumerate("abc"):  # a, b, c each fill one block with their own tokens
        blocks.grow(tables[name], 4)
        blocks.register(tables[name], chain_hashes([offset] * 4, 4, []))
    owned = {name: table[0] for name, table in tables.items()}
    for name in "bac":  # freed in this order: b is the least recently freed
        blocks.release(tables[name])
    assert blocks.num_free == 4 and blocks.num_cached == 3
    fresh: list[int] = []
    blocks.grow(fresh, 4)
    assert fresh == [3] and blocks.num_cached == 3  # the never-cached block goes first
    blocks.grow(fresh, 8)
    assert fresh[-1] == owned["b"] and blocks.num_cached == 2
    assert blocks.lookup(chain_hashes([1] * 4 + [9], 4, []), 5) == []  # b's prefix is gone
    assert blocks.lookup(chain_hashes([0] * 4 + [9], 4, []), 5) == [owned["a"]]
    blocks.grow(fresh, 12)
    assert fresh[-1] == owned["a"]


def test_taking_a_cached_block_makes_it_the_most_recently_used() -> None:
    blocks = BlockManager(num_blocks=2, block_size=4, prefix_caching=True)
    a, b = [], []
    blocks.grow(a, 4)
    blocks.register(a, chain_hashes([1] * 4, 4, []))
    blocks.grow(b, 4)
    blocks.register(b, chain_hashes([2] * 4, 4, []))
    blocks.release(a)
    blocks.release(b)
    again: list[int] = []
    blocks.take(again, blocks.lookup(chain_hashes([1] * 5, 4, []), 5))  # a is used again...
    blocks.release(again)  # ...and freed after b
    fresh: list[int] = []
    blocks.grow(fresh, 4)
    assert fresh == [1]  # b's block: now the least recently freed


def test_a_preempted_sequence_resumes_from_its_own_cached_blocks() -> None:
    driver = Driver(CONFIG, num_blocks=6, block_size=4)
    driver.add([1, 2, 3, 4, 5, 6, 7], max_tokens=8, arrival=0.0)
    second = driver.add([8, 9, 10, 11, 12, 13, 14], max_tokens=8, arrival=1.0)
    while not second.num_preemptions:
        driver.step()
    while second.num_computed_tokens == 0:
        plan = driver.step()
    refeed = next(c for c in plan.chunks if c.seq_id == second.seq_id)
    assert refeed.start_position > 0 and plan.prefix_cache_hits == refeed.start_position
    driver.run()
    assert_reference_outputs(driver)


@pytest.mark.parametrize("seed", range(4))
def test_random_traffic_sharing_prefixes_on_a_tight_cache_keeps_every_invariant(seed: int) -> None:
    """Prompts drawn from a few shared prefixes, with cancellations and preemptions: every
    survivor gets the reference tokens, the cache is hit, every block comes back."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 40) for _ in range(rng.randint(3, 14))] for _ in range(3)]
    config = SchedulerConfig(policy="priority", max_num_seqs=6, max_num_batched_tokens=20, long_prefill_token_threshold=8)
    driver = Driver(config, num_blocks=12, block_size=4)
    cancelled: set[int] = set()
    hits = preemptions = 0
    for step in range(400):
        if step < 250 and rng.random() < 0.3:
            prompt = rng.choice(prefixes) + [rng.randrange(1, 40) for _ in range(rng.randint(0, 6))]
            driver.add(prompt, max_tokens=rng.randint(1, 16), priority=rng.randint(0, 2))
        if rng.random() < 0.03:
            open_seqs = [s for s in driver.seqs if s.status is not RequestStatus.FINISHED]
            if open_seqs:
                victim = rng.choice(open_seqs)
                driver.scheduler.finish(victim)
                cancelled.add(victim.seq_id)
        plan = driver.step()
        hits += plan.prefix_cache_hits
        preemptions += len(plan.preempted)
    driver.run()
    assert hits > 0 and preemptions > 0
    for seq in driver.seqs:
        if seq.seq_id not in cancelled:
            assert seq.output_token_ids == reference_tokens(seq.token_ids[: seq.num_prompt_tokens], seq.request.params.max_tokens)
    assert driver.scheduler.blocks.num_free == 12 and driver.scheduler.blocks.num_used == 0


def test_the_real_engine_gives_the_same_greedy_tokens_from_shared_blocks() -> None:
    """A tiny random Llama through the loop: prompts sharing a 13-token prefix, one after
    another and side by side, reuse its cached blocks and still get transformers' greedy
    tokens for each prompt alone (the last-token and decode paths read shared blocks)."""
    pytest.importorskip("transformers")
    import torch

    from llm.loop import EngineLoop
    from tests.unit.llm_fakes import FakeTokenizer
    from tests.unit.test_llm_loop import Recorder, drain, request
    from tests.unit.tiny_llama import tiny_executor, tiny_hf_llama

    hf_model = tiny_hf_llama(randomise_norms=False)

    def greedy_alone(prompt: list[int], max_tokens: int) -> list[int]:
        tokens = list(prompt)
        with torch.no_grad():
            for _ in range(max_tokens):
                tokens.append(int(hf_model(torch.tensor([tokens])).logits[0, -1].argmax()))
        return tokens[len(prompt) :]

    recorder = Recorder()
    loop = EngineLoop(
        tiny_executor(hf_model, num_blocks=32), SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32), FakeTokenizer(), recorder
    )
    generator = torch.Generator().manual_seed(7)
    prefix = torch.randint(3, 97, (13,), generator=generator).tolist()
    prompts = {f"p{i}": prefix + torch.randint(3, 97, (i,), generator=generator).tolist() for i in range(4)}  # p0: the prefix alone
    loop.submit(request("first", [*prefix, 5, 6], max_tokens=6, ignore_eos=True), recorder.callback)
    drain(loop)
    for request_id, prompt in prompts.items():
        loop.submit(request(request_id, prompt, max_tokens=6, ignore_eos=True), recorder.callback)
    drain(loop)
    assert sum(step.prefix_cache_hits for step in recorder.steps) == 12 + 12 + 12 + 12, "p0..p3 each reuse the 3 full prefix blocks"
    for request_id, prompt in prompts.items():
        assert recorder.tokens(request_id) == greedy_alone(prompt, 6), request_id
