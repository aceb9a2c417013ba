"""BindingTable (the watcher's compact store) against a plain set of entries: the same
bindings, and the return codes say exactly when a binding appears or goes."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rtroute.amqp.binding_table import BindingTable
from rtroute.amqp.management_listing import json_rows

entries = st.tuples(st.sampled_from(["q1", "q2", "x1"]), st.sampled_from(["queue", "exchange"]),
                    st.sampled_from(["a", "a.b", "#"]),
                    st.sampled_from([(), (("x", ("int", 1)),), (("x", ("bool", True)),)]))
events = st.one_of(
    st.tuples(st.sampled_from(["add", "remove"]), entries),
    st.tuples(st.just("drop"), st.tuples(st.sampled_from(["q1", "x1"]),
                                         st.sampled_from(["queue", "exchange"]))),
    st.tuples(st.just("clear"), st.none()))


def _bindings(reference: set) -> set:
    return {e[:3] for e in reference}


@given(st.lists(events, max_size=40))
def test_the_table_keeps_what_a_set_of_entries_keeps(script):
    table, reference = BindingTable(), set()
    for action, payload in script:
        before = _bindings(reference)
        if action == "add":
            code = table.add(payload)
            expected = 0 if payload in reference else (1 if payload[:3] in before else 2)
            reference.add(payload)
            assert code == expected
        elif action == "remove":
            code = table.remove(payload)
            present = payload in reference
            reference.discard(payload)
            assert code == (0 if not present else (1 if payload[:3] in _bindings(reference)
                                                   else 2))
        elif action == "drop":
            keys = table.drop(*payload)
            gone = {e for e in reference if e[:2] == payload}
            reference -= gone
            assert sorted(keys) == sorted({e[2] for e in gone})
        else:
            assert set(table.clear()) == before
            reference.clear()
        assert set(table.bindings()) == _bindings(reference)
        assert len(table) == len(_bindings(reference))
        for entry in reference:
            assert table.has(entry) and entry in table.entries_of(*entry[:3])


@given(st.lists(entries, max_size=12), st.lists(entries, max_size=12))
def test_missing_from_is_the_bindings_the_other_lacks(ours, theirs):
    a, b = BindingTable(), BindingTable()
    for entry in ours:
        a.add(entry)
    for entry in theirs:
        b.add(entry)
    assert set(a.missing_from(b)) == {e[:3] for e in ours} - {e[:3] for e in theirs}


@given(st.lists(st.dictionaries(st.sampled_from(["destination", "routing_key"]),
                                st.text(max_size=5)), max_size=6),
       st.sampled_from(["", " ", "\n  "]))
def test_json_rows_reads_an_array_item_by_item(rows, space):
    import json

    text = json.dumps(rows, separators=(space + "," + space, ":"))
    assert list(json_rows((space + text + space).encode())) == rows
