"""The matching rules, pinned for the native core and its pure twin alike."""
import os

import pytest

import rtroute.core
from rtroute.sidecar.demo import PLUGIN_QUEUES, PLUGIN_README_TABLE

PLUGIN_BINDINGS = PLUGIN_QUEUES  # the rtopic plugin README's queues A-F and their keys

# The rtopic plugin README's own examples (queue names stand for their binding keys).
PLUGIN_EXAMPLES = [
    *PLUGIN_README_TABLE,
    # beyond the README
    ("#.app1.#", "ABEF"),
    ("server1.*.*.info", "ACE"),
    ("*.*.*.*", "ABCDEF"),
    ("*.*.*", ""),
    ("*.*.*.*.*", ""),
    ("#.#", "ABCDEF"),
    ("#.*.#.*.#.*.#.*.#", "ABCDEF"),
    ("#.warning.#", "D"),
    ("server1.#.info", "ACE"),
    ("server3.#", ""),
]


def reverse(impl, *keys):
    m = impl.ReverseMatcher()
    for k in keys:
        m.add(k)
    return m


def forward(impl, *keys):
    m = impl.ForwardMatcher()
    for k in keys:
        m.add(k)
    return m


@pytest.mark.parametrize("query,expected", PLUGIN_EXAMPLES)
def test_plugin_readme_examples(impl, query, expected):
    m = reverse(impl, *PLUGIN_BINDINGS.values())
    assert sorted(m.match(query)) == sorted(PLUGIN_BINDINGS[q] for q in expected)


@pytest.mark.parametrize(
    "bindings,query,expected",
    [
        (["a", "a.b", "b"], "a.#", ["a", "a.b"]),  # '#' matches zero words
        (["a", "a.b", "a.b.c"], "#.a.#", ["a", "a.b", "a.b.c"]),
        (["a.b.c.d", "a.x.d", "a.d", "a.b.c"], "a.#.d", ["a.b.c.d", "a.x.d", "a.d"]),
        (["a.b.c", "x.b.c", "b.c"], "*.b.c", ["a.b.c", "x.b.c"]),  # '*' at the start
        (["a.b.c", "a.b.x", "a.b"], "a.b.*", ["a.b.c", "a.b.x"]),  # '*' at the end
        (["", "a", "a.b"], "#", ["", "a", "a.b"]),  # '#' alone, empty key included
        (["", "a"], "", [""]),  # the empty key has zero words
        (["", "a"], "*", ["a"]),
        (["a..b", "a.b", "a.x.b"], "a.*.b", ["a..b", "a.x.b"]),  # empty words are words
        (["a..b", "a.b"], "a..b", ["a..b"]),
        (["a.", "a"], "a.*", ["a."]),
        ([".", ""], "*.*", ["."]),
        (["ünï.cödé.🐇", "ünï.x"], "ünï.#.🐇", ["ünï.cödé.🐇"]),
        (["*", "#", "a"], "*", ["*", "#", "a"]),  # literal wildcard words in bindings
        (["*", "#", "a"], "a", ["a"]),
        (["a.b.c.d.e", "a.c.e", "a.b.c"], "a.#.c.#.e", ["a.b.c.d.e", "a.c.e"]),
        (["a.b.a.b", "a.b"], "#.a.b", ["a.b.a.b", "a.b"]),
    ],
)
def test_reverse_rules(impl, bindings, query, expected):
    assert sorted(reverse(impl, *bindings).match(query)) == sorted(expected)


@pytest.mark.parametrize(
    "bindings,key,expected",
    [
        (["a.#", "a.*", "#", "*", "a"], "a", ["a.#", "#", "*", "a"]),
        (["#", "*", "", "a.#"], "", ["#", ""]),
        (["#.a.#", "a.#.a", "#.#"], "a.a", ["#.a.#", "a.#.a", "#.#"]),
        (["*.*", "*.#", "#.*"], "a..", ["*.#", "#.*"]),
        (["a.*.c", "a.#.c", "a.b"], "a.b.c", ["a.*.c", "a.#.c"]),
        (["a.b"], "a.*", []),  # the query is concrete: '*' is a literal word here
        (["a.*"], "a.*", ["a.*"]),
        (["#.b.#.b.#"], "b.b.b.b", ["#.b.#.b.#"]),
    ],
)
def test_forward_rules(impl, bindings, key, expected):
    assert sorted(forward(impl, *bindings).match(key)) == sorted(expected)


def test_each_binding_reported_once_with_many_hashes(impl):
    m = reverse(impl, "a.a.a.a", "a", "")
    assert sorted(m.match("#.#.a.#.#")) == ["a", "a.a.a.a"]
    f = forward(impl, "#.#.a.#.#")
    assert f.match("a.a.a.a.a.a") == ["#.#.a.#.#"]


def test_keys_at_the_255_byte_limit(impl):
    longest = ".".join(["abcd"] * 51)  # 51*5 - 1 = 254
    longest += "x"
    assert len(longest.encode()) == 255
    m = reverse(impl, longest)
    assert m.match("#.abcdx") == [longest]
    assert m.match("abcd.#") == [longest]
    with pytest.raises(ValueError, match="255"):
        m.add(longest + "y")
    many_words = ".".join("w" * 128)  # 128 one-letter words, 255 bytes
    assert len(many_words.encode()) == 255
    m.add(many_words)
    assert m.match("*." * 127 + "*") == [many_words]
    assert forward(impl, "#.w").match(many_words) == ["#.w"]


def test_add_remove_report_change_and_duplicates_are_one_binding(impl):
    m = impl.ReverseMatcher()
    assert m.add("a.b") is True
    assert m.add("a.b") is False
    assert len(m) == 1 and "a.b" in m
    assert m.match("a.*") == ["a.b"]
    assert m.remove("a.b") is True
    assert m.remove("a.b") is False
    assert len(m) == 0 and "a.b" not in m
    assert m.match("#") == []


def test_bind_unbind_churn_keeps_results_exact(impl):
    m = impl.ReverseMatcher()
    live = set()
    for round_ in range(20):
        for i in range(50):
            key = f"s{i % 7}.r{round_ % 3}.k{i}"
            if (i + round_) % 3:
                m.add(key)
                live.add(key)
            else:
                m.remove(key)
                live.discard(key)
        assert sorted(m.match("#")) == sorted(live)
        assert sorted(m.match("s1.#")) == sorted(k for k in live if k.startswith("s1."))
        assert sorted(m) == sorted(live)
    for key in list(live):
        m.remove(key)
    assert len(m) == 0 and m.match("#") == []


def test_batch_and_union_apis(impl):
    m = reverse(impl, "a.b", "a.c", "x.y")
    assert [sorted(r) for r in m.match_many(["a.*", "#.y", "zz", "a.b"])] == [
        ["a.b", "a.c"], ["x.y"], [], ["a.b"]]
    assert sorted(m.match_union(["a.*", "a.b", "#.b", "x.y"])) == ["a.b", "a.c", "x.y"]
    assert m.match_many([]) == [] and m.match_union([]) == []


@pytest.mark.parametrize("gc_on", [True, False])
def test_a_large_batch_matches_query_by_query_and_leaves_the_collector_as_it_was(impl, gc_on):
    import gc

    keys = [f"k{i % 7}.w{i}" for i in range(700)]
    m = reverse(impl, *keys)
    queries = [f"k{i % 9}.w{i}" for i in range(600)] + ["k1.#", "#", "none", "k2.*"] * 20
    was = gc.isenabled()
    (gc.enable if gc_on else gc.disable)()
    try:
        got = m.match_many(queries)
        assert gc.isenabled() is gc_on
    finally:
        (gc.enable if was else gc.disable)()
    assert [sorted(r) for r in got] == [sorted(m.match(q)) for q in queries]
    assert all(type(r) is list for r in got)


@pytest.mark.parametrize("bad", [None, 5, 1.5, ["a"], object()])
def test_non_string_keys_raise_type_error(impl, bad):
    m = impl.ReverseMatcher()
    with pytest.raises(TypeError):
        m.add(bad)
    with pytest.raises(TypeError):
        m.match(bad)
    with pytest.raises(TypeError):
        m.match_many(["a", bad])


@pytest.mark.parametrize("bad", [b"\xff\xfe", "a.\udc80", b"a.\xc3"])
def test_invalid_utf8_raises_value_error(impl, bad):
    m = impl.ForwardMatcher()
    with pytest.raises(ValueError, match="UTF-8"):
        m.add(bad)
    with pytest.raises(ValueError, match="UTF-8"):
        m.match(bad)


def test_utf8_bytes_are_accepted_and_answered_as_str(impl):
    m = impl.ReverseMatcher()
    m.add("café.x".encode())
    assert m.match("café.*") == ["café.x"]
    assert m.match(b"*.x") == ["café.x"]


def test_over_long_query_is_rejected_but_long_queries_work(impl):
    m = reverse(impl, "a.b")
    with pytest.raises(ValueError):
        m.match("a" * 70000)
    assert m.match("#." * 1000 + "b") == ["a.b"]
    assert m.match("*." * 30000 + "b") == []


def test_hostile_pattern_does_not_explode(impl):
    m = impl.ReverseMatcher()
    for i in range(300):
        m.add(".".join(f"w{(i * j) % 5}" for j in range(1, 7)))
    assert len(m.match("#.#.#.#.#.#.#.#.#.#.#")) == len(m)
    assert len(m.match("#.w1.#.w1.#.w1.#.w1.#.w1.#.w9")) == 0


def test_native_extension_is_in_use_when_ci_expects_it():
    if os.environ.get("RTROUTE_EXPECT_NATIVE") != "1":
        pytest.skip("only CI requires the native build")
    assert rtroute.core.IMPLEMENTATION == "native"
