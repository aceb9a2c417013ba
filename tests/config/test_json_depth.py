"""The depth test of JSON documents (``rtroute.config.json_lines._nests_deeper_than``: strings,
escapes and brackets dropped at C speed) against an obviously correct reference, a walk of the
parsed value. (Not in test_hostile_input.py: its cases each have a 2-second alarm.)"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.config.json_lines import _nests_deeper_than

from ..hypothesis_profiles import examples


def _depth(value):   # the obviously correct reference
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


_BRACKETY_TEXT = st.text(alphabet='[]{}"\\ab\n\u00e9', max_size=6)
_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.integers(), _BRACKETY_TEXT),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(_BRACKETY_TEXT, children, max_size=3)),
    max_leaves=40,
)


@settings(max_examples=examples(400), deadline=None)
@given(value=_JSON_VALUES, ascii_only=st.booleans(), limit=st.integers(0, 20))
def test_the_depth_test_agrees_with_a_walk_of_the_parsed_value(value, ascii_only, limit):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert _nests_deeper_than(text, limit) == (_depth(value) > limit)


@pytest.mark.parametrize("depth", [15, 16, 17, 40, 600])
def test_the_depth_test_walks_what_sixteen_passes_leave(depth):
    text = "[" * depth + '"]]"' + "]" * depth
    for limit in (depth - 1, depth, depth + 1):
        assert _nests_deeper_than(text, limit) == (depth > limit)
