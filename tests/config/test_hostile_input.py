"""Hostile config input becomes a ``file:line`` error in time and memory linear in its size,
never a traceback: deep nesting, huge dotted keys, escapes beyond the last character, numbers
Python will not convert, oversized files. Each case runs under an alarm: before the fix it
recursed past Python's limit, overflowed, or ran for seconds and gigabytes."""
from __future__ import annotations

import json
import signal
import textwrap

import pytest

from rtroute.config.json_lines import JSON_PARSE_DEPTH, parse_json
from rtroute.config.lines import (
    MAX_CONFIG_BYTES,
    MAX_DEPTH,
    MAX_KEY_PARTS,
    json_source_map,
    load_toml,
)
from rtroute.config.rtroute_toml import ConfigError, load, loads, loads_divert
from rtroute.shovel.erlang_terms import ErlangSyntaxError, parse
from rtroute.shovel.importers import from_definitions, from_erlang_config

#: cases whose linear run takes over a second here (1.2 s on 2 idle cores): a deadline with
#: room for a loaded CI machine, still far below their quadratic run (200,000 strings joined
#: one by one copy ~160 GB)
LONGER = {"test_many_adjacent_erlang_strings_concatenate_in_linear_time": 15}


@pytest.fixture(autouse=True)
def deadline(request):
    """Fail (instead of hanging or eating memory) when a case takes more than 2 s (or its
    :data:`LONGER` deadline)."""
    seconds = LONGER.get(request.node.name, 2)

    def expired(_signum, _frame):
        raise TimeoutError(f"took more than {seconds} s: is the parser still linear?")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------------ TOML


def test_a_dotted_key_of_24000_parts_is_refused_at_once():
    text = '[broker]\nuri = "amqp://"\n' + ".".join(["a"] * 24_000) + " = 1\n"
    with pytest.raises(ConfigError) as info:
        loads(text, "big.toml")
    assert str(info.value).startswith("big.toml:3: ")
    assert f"more than {MAX_KEY_PARTS} parts" in info.value.message


def test_a_table_name_of_too_many_parts_is_refused():
    with pytest.raises(ConfigError, match="more than .* parts") as info:
        loads("\n[" + ".".join(["t"] * 5000) + "]\n", "big.toml")
    assert info.value.line == 2


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{x = ", "}")])
def test_toml_nested_5000_deep_is_refused_with_its_line(opening, closing):
    text = "[broker]\n\nx = " + opening * 5000 + "1" * (opening == "{x = ") + closing * 5000
    with pytest.raises(ConfigError) as info:
        loads(text, "deep.toml")
    assert info.value.line == 3 and f"more than {MAX_DEPTH} levels" in info.value.message


def test_inline_tables_of_dotted_keys_cannot_build_a_path_deeper_than_the_limit():
    nested = "".join("{" + ".".join(["k"] * (MAX_KEY_PARTS - 1)) + " = " for _ in range(10))
    text = "[broker]\nx = " + nested + "1" + "}" * 10 + "\n"
    with pytest.raises(ConfigError) as info:
        load_toml(text, "deep.toml")
    assert info.value.line == 2 and "nested more than" in info.value.message


def test_toml_integer_python_will_not_convert_is_an_error_with_its_line():
    with pytest.raises(ConfigError) as info:
        loads("[[exchange]]\nname = 'x'\nprefetch = " + "9" * 5000 + "\n", "big.toml")
    assert info.value.line == 3 and "more than 4300 digits" in info.value.message


def test_config_file_larger_than_the_limit_is_refused_unread(tmp_path):
    path = tmp_path / "rtroute.toml"
    path.write_bytes(b"# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match="larger than 4 MiB") as info:
        load(path)
    assert info.value.path == str(path)
    with pytest.raises(ConfigError, match="larger than"):
        loads("#" * (MAX_CONFIG_BYTES + 1))


def test_the_shape_check_sees_no_structure_inside_strings_and_comments():
    deep = "[" * (MAX_DEPTH + 20) + "." * (MAX_KEY_PARTS + 20)
    text = textwrap.dedent(f'''\
        [broker]  # {deep}
        uri = "amqp://h/{deep.replace('.', '')}"
        management_uri = 'http://h:15672/{deep}'

        [[exchange]]
        name = """{deep}\\""" ""x"""
        alternate_exchange = \'\'\'{deep}\'\'\'\'\'
        bindings = [{{ destination = "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p", key = "{deep}" }}]
        ''')
    config = loads(text)
    assert config.exchanges[0].name == deep + '""" ""x'
    assert config.exchanges[0].alternate_exchange == deep + "''"
    assert config.broker.management_uri.endswith(deep)


def test_keys_up_to_the_limits_still_load():
    key = ".".join(["k"] * MAX_KEY_PARTS)
    nested = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)  # one level is the [t] header
    data, source = load_toml(f"[t]\n{key} = 1\nn = {nested}\n")
    assert source.line(("t",) + ("k",) * MAX_KEY_PARTS) == 2
    depth, value = 0, data["t"]["n"]
    while value:
        depth, value = depth + 1, value[0]
    assert depth == MAX_DEPTH - 2


# ---------------------------------------------------------------------------- Erlang terms


def test_erlang_lists_nested_5000_deep_are_refused_with_line_and_column():
    with pytest.raises(ErlangSyntaxError) as info:
        from_erlang_config("%% deep\n" + "[" * 5000 + "]" * 5000 + ".", "rabbitmq.config")
    assert (info.value.line, info.value.column) == (2, MAX_DEPTH + 1)
    assert "nested more than" in info.value.message


def test_erlang_tuples_nested_deep_are_refused():
    with pytest.raises(ErlangSyntaxError, match="nested more than"):
        parse("{" * 5000 + "}" * 5000 + ".")


@pytest.mark.parametrize("escape, problem", [
    (r"\x{ffffffffffffffff}", "above the last character"),
    (r"\x{110000}", "above the last character"),
    (r"\x{" + "f" * 100_000 + "}", "above the last character"),
    (r"\x{D800}", "surrogate"),
])
def test_erlang_escapes_beyond_unicode_are_errors(escape, problem):
    with pytest.raises(ErlangSyntaxError) as info:
        parse('[\n "ok", "' + escape + '"].', "rabbitmq.config")
    assert (info.value.line, info.value.column) == (2, 9) and problem in info.value.message


def test_erlang_escape_at_the_last_character_is_fine():
    assert parse(r'["\x{10FFFF}"].')[0].items[0].value == "\U0010ffff"


@pytest.mark.parametrize("text", ["[" + "1" * 5000 + "].", "[16#" + "1" * 5000 + ", 36#"
                                  + "z" * 5000 + "].", "[1.0e999]."])
def test_erlang_numbers_python_will_not_hold_are_errors(text):
    with pytest.raises(ErlangSyntaxError):
        parse(text)


def test_erlang_unicode_digits_are_not_numbers():
    with pytest.raises(ErlangSyntaxError, match="unexpected character"):
        parse("[\u00b2].")
    with pytest.raises(ErlangSyntaxError):
        parse("[-\u0663].")


def test_many_adjacent_erlang_strings_concatenate_in_linear_time():
    term = parse("[" + '"abcdefgh" ' * 200_000 + "].")[0]
    assert len(term.items[0].value) == 1_600_000


def test_oversized_erlang_config_is_refused():
    with pytest.raises(ConfigError, match="larger than"):
        from_erlang_config("%" * (MAX_CONFIG_BYTES + 1), "rabbitmq.config")


# ------------------------------------------------------------------------------------ JSON


def test_definitions_nested_5000_deep_are_refused_with_their_line():
    text = '{\n "parameters": [],\n "x": ' + "[" * 5000 + "]" * 5000 + "}"
    with pytest.raises(ConfigError) as info:
        from_definitions(text, "defs.json")
    assert str(info.value).startswith("defs.json:3: ") and "nested" in info.value.message


def test_a_document_json_parses_is_still_refused_past_the_depth_every_python_refuses():
    # json on Python 3.13 parses 5,000 levels, on 3.9-3.11 about 1,000: one rule for all
    deep = "[" * (JSON_PARSE_DEPTH - 1) + "]" * (JSON_PARSE_DEPTH - 1)
    assert parse_json('{"x": ' + deep + "}", "ok.json") == {"x": json.loads(deep)}
    with pytest.raises(ConfigError) as info:
        parse_json('{\n"x":\n [' + deep + "]}", "deep.json")
    assert str(info.value).startswith("deep.json:3: ")
    assert f"more than {JSON_PARSE_DEPTH}" in info.value.message


def test_a_shovel_parameter_nested_beyond_the_limit_is_refused_with_its_line():
    value = {"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://",
             "src-queue-args": {"x-deep": json.loads("[" * 150 + "]" * 150)}}
    text = json.dumps({"parameters": [{"component": "shovel", "name": "s", "vhost": "/",
                                       "value": value}]}, indent=1)
    with pytest.raises(ConfigError) as info:
        from_definitions(text, "defs.json")
    assert info.value.line is not None and f"more than {MAX_DEPTH}" in info.value.message


def test_deep_sections_other_than_shovels_are_skipped_not_mapped():
    deep = "[" * 150 + "]" * 150
    text = ('{"queues": [' + deep + '], "parameters": [{"component": "shovel", "name": "s", '
            '"vhost": "/", "value": {"src-uri": "amqp://", "src-queue": "q", '
            '"dest-uri": "amqp://", "dest-queue": "d"}}]}')
    assert [s.name for s in from_definitions(text, "defs.json")] == ["s"]


def test_json_source_map_refuses_what_it_would_recurse_too_deep_into():
    with pytest.raises(ConfigError, match="nested more than"):
        json_source_map("[" * 500 + "]" * 500, path="x.json")


def test_a_divert_body_nested_deep_is_a_config_error():
    with pytest.raises(ConfigError, match="nested"):
        loads_divert('{"name": ' + "[" * 100_000 + "]" * 100_000 + "}")


def test_definitions_integer_python_will_not_convert_is_an_error_with_its_line():
    with pytest.raises(ConfigError) as info:
        from_definitions('{\n"parameters": [],\n"n": ' + "7" * 5000 + "}", "defs.json")
    assert info.value.line == 3 and "digits" in info.value.message


def test_definitions_that_are_not_utf8_are_an_error_with_the_line():
    with pytest.raises(ConfigError, match="not UTF-8") as info:
        from_definitions(b'{\n"parameters": [],\n"n": "\xff"}', "defs.json")
    assert info.value.line == 3
