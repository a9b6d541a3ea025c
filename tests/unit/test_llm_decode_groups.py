"""How a step's decodes are cut into padded attention calls (hand-computed costs)."""

from __future__ import annotations

import pytest

from llm.engine.step_plan import group_by_length


@pytest.mark.parametrize(
    ("widths", "call_cost", "groups"),
    [
        # one call: 5 x 10 blocks x 16 = 800 padded keys + 256 = 1056; split after the short three:
        # (3 x 1 x 16 + 256) + (2 x 10 x 16 + 256) = 304 + 576 = 880, cheaper; a third call costs more
        ([1, 1, 1, 10, 10], 256, [(0, 3), (3, 5)]),
        ([2, 3, 4], 256, [(0, 3)]),  # one call 3 x 4 x 16 + 256 = 448; any split pays 256 twice
        ([2, 3, 4], 0, [(0, 1), (1, 2), (2, 3)]),  # free calls: no padding at all
        ([7], 256, [(0, 1)]),
        ([5, 5, 5, 9, 9], 0, [(0, 3), (3, 5)]),  # free calls still never split a run of equal widths (no padding saved)
        ([], 256, []),
    ],
)
def test_groups_minimise_padded_keys_plus_a_cost_per_call(widths, call_cost, groups):
    assert group_by_length(widths, 16, call_cost) == groups
