"""Source maps: the line of every key and array element of a TOML or JSON document."""
import textwrap

from rtroute.config.lines import SourceMap, json_source_map, suggest, toml_source_map

TOML = textwrap.dedent('''\
    # comment with [brackets] and key = "value"
    [broker]
    uri = "amqp://" # trailing
    "quoted.key" = 1
    'literal key' = 2
    dotted.inner.key = 3

    [[exchange]]
    name = "a"
    text = """
    [not.a.table]
    still = "text"
    """
    bindings = [
      { destination = "A", key = "k" },

      { destination = "B",
        key = "l" },
    ]

    [[exchange]]
    name = "b"
    raw = \'\'\'[[nor]]\'\'\'

    [[shovel]]
    name = "s"
    [shovel.filter]
    key = "a.b"
    [[shovel.sources.declarations]]
    method = "queue.declare"
    [[shovel.sources.declarations]]
    method = "queue.bind"

    [[shovel]]
    name = "t"
    sources = { brokers = [
        "amqp://a",
        "amqp://b",
    ] }
''')


def test_toml_keys_headers_and_array_elements_have_their_lines():
    lines = toml_source_map(TOML)
    expected = {
        ("broker",): 2,
        ("broker", "uri"): 3,
        ("broker", "quoted.key"): 4,
        ("broker", "literal key"): 5,
        ("broker", "dotted"): 6,
        ("broker", "dotted", "inner", "key"): 6,
        ("exchange", 0): 8,
        ("exchange", 0, "name"): 9,
        ("exchange", 0, "text"): 10,
        ("exchange", 0, "bindings"): 14,
        ("exchange", 0, "bindings", 0): 15,
        ("exchange", 0, "bindings", 0, "key"): 15,
        ("exchange", 0, "bindings", 1): 17,
        ("exchange", 0, "bindings", 1, "key"): 18,
        ("exchange", 1): 21,
        ("exchange", 1, "name"): 22,
        ("exchange", 1, "raw"): 23,
        ("shovel", 0): 25,
        ("shovel", 0, "filter"): 27,
        ("shovel", 0, "filter", "key"): 28,
        ("shovel", 0, "sources", "declarations", 0): 29,
        ("shovel", 0, "sources", "declarations", 0, "method"): 30,
        ("shovel", 0, "sources", "declarations", 1, "method"): 32,
        ("shovel", 1, "name"): 35,
        ("shovel", 1, "sources", "brokers", 0): 37,
        ("shovel", 1, "sources", "brokers", 1): 38,
    }
    for path, line in expected.items():
        assert lines.line(path) == line, path
    # the text inside the multi-line string is not a table
    assert ("not",) not in lines.lines


def test_missing_keys_fall_back_to_their_table():
    lines = toml_source_map(TOML)
    assert lines.line(("exchange", 1, "kind")) == 21
    assert lines.line(("shovel", 0, "filter", "selector")) == 27
    assert lines.line(("nowhere",)) is None


def test_json_keys_and_elements_have_their_lines():
    text = '{\n  "parameters": [\n    {"name": "a",\n     "value": {"src-uri": [\n' \
           '        "amqp://x", "amqp://y"]}},\n    {"name": "b"}\n  ],\n  "n": -1.5e3\n}\n'
    lines = json_source_map(text)
    assert lines.line(("parameters",)) == 2
    assert lines.line(("parameters", 0)) == 3
    assert lines.line(("parameters", 0, "value")) == 4
    assert lines.line(("parameters", 0, "value", "src-uri", 1)) == 5
    assert lines.line(("parameters", 1, "name")) == 6
    assert lines.line(("n",)) == 8


def test_labels_use_original_names_and_hide_split_keys():
    source = SourceMap(names={("v", "sources"): "", ("v", "sources", "brokers"): "src-uri"})
    assert source.label(("v", "sources", "brokers", 2), start=1) == "src-uri[2]"
    assert source.label(("v", "publish_properties", "priority"), start=1) == (
        "publish_properties.priority")


def test_suggestions():
    assert suggest("ack_mod", ["ack_mode", "queue"]) == " (did you mean 'ack_mode'?)"
    assert suggest("strip", ["ANYCAST", "STRIP"]) == " (did you mean 'STRIP'?)"
    assert suggest("dest", ["destination", "key"]) == " (did you mean 'destination'?)"
    assert suggest("zzz", ["destination", "key"]) == ""
