"""Property tests: the native core and reference.py agree on random bindings and patterns."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtroute.core import reference

from ..hypothesis_profiles import examples
from .conftest import NATIVE

pytestmark = pytest.mark.skipif(NATIVE is None, reason="extension not built")

WORDS = ["a", "b", "c", "", "ü"]
word = st.sampled_from(WORDS)
concrete = st.lists(word, min_size=0, max_size=6).map(".".join)
pattern = st.lists(st.sampled_from(WORDS + ["*", "#", "#"]), min_size=0, max_size=7).map(".".join)
SETTINGS = settings(max_examples=examples(300), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def build(cls_name, keys, removals):
    mats = [getattr(reference, cls_name)(), getattr(NATIVE, cls_name)()]
    for m in mats:
        for k in keys:
            m.add(k)
        for k in removals:
            m.remove(k)
    return mats


@SETTINGS
@given(st.lists(concrete, max_size=30), st.lists(concrete, max_size=10), st.lists(pattern,
       min_size=1, max_size=8))
def test_reverse_matcher_agrees_with_reference(keys, removals, queries):
    ref, nat = build("ReverseMatcher", keys, removals)
    assert sorted(nat) == sorted(ref)
    for q in queries:
        expected = sorted(ref.match(q))
        assert sorted(nat.match(q)) == expected
        assert sorted(nat.match_dir(q, "forward")) == expected
        assert sorted(nat.match_dir(q, "reversed")) == expected
    assert [sorted(r) for r in nat.match_many(queries)] == [sorted(ref.match(q)) for q in queries]
    assert sorted(nat.match_union(queries)) == sorted(ref.match_union(queries))


@SETTINGS
@given(st.lists(pattern, max_size=30), st.lists(pattern, max_size=10), st.lists(concrete,
       min_size=1, max_size=8))
def test_forward_matcher_agrees_with_reference(keys, removals, queries):
    ref, nat = build("ForwardMatcher", keys, removals)
    assert len(nat) == len(ref)
    for q in queries:
        assert sorted(nat.match(q)) == sorted(ref.match(q))
    assert sorted(nat.match_union(queries)) == sorted(ref.match_union(queries))
