"""The Erlang-term parser: every term kind of a config file, and errors with line and column."""
import pytest

from rtroute.shovel.erlang_terms import (
    Atom,
    ErlangSyntaxError,
    parse,
    parse_one,
    to_python,
)


def value(text):
    return to_python(parse_one(text))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("foo.", Atom("foo")),
        ("fooBar_1@host.", Atom("fooBar_1@host")),
        ("'queue.declare'.", Atom("queue.declare")),
        ("'MUTHA-SHOVELER'.", Atom("MUTHA-SHOVELER")),
        (r"'it\'s'.", Atom("it's")),
        ("''.", Atom("")),
        ('"amqp://".', "amqp://"),
        ('"".', ""),
        (r'"a\"b\\c\n\t".', 'a"b\\c\n\t'),
        (r'"\x41\x{263A}\101\s\^A".', "A\u263aA \x01"),
        ('"abc" "def".', "abcdef"),
        ('<<"my_queue">>.', b"my_queue"),
        ("<<>>.", b""),
        ('<<"caf\u00e9"/utf8>>.', "caf\u00e9".encode()),
        ("<<1, 2, 255>>.", b"\x01\x02\xff"),
        ('<<"ab", 67, $d>>.', b"abCd"),
        ("42.", 42),
        ("-7.", -7),
        ("16#ff.", 255),
        ("16#FF.", 255),
        ("2#1010.", 10),
        ("36#zz.", 1295),
        ("1_000_000.", 1000000),
        ("$a.", 97),
        (r"$\n.", 10),
        ("$ .", 32),
        ("2.5.", 2.5),
        ("-0.5.", -0.5),
        ("1.0e3.", 1000.0),
        ("6.02E-2.", 0.0602),
        ("{}.", ()),
        ("{a, 1}.", (Atom("a"), 1)),
        ("[].", []),
        ("[1, [2, {3}]].", [1, [2, (3,)]]),
        ("[{queue, <<\"q\">>}, durable].", [(Atom("queue"), b"q"), Atom("durable")]),
    ],
)
def test_every_term_kind_parses(text, expected):
    got = value(text)
    assert got == expected
    assert type(got) is type(expected)


def test_atoms_and_strings_stay_distinct():
    atom, string = value("[abc, \"abc\"].")
    assert isinstance(atom, Atom) and not isinstance(string, Atom)
    assert repr(atom) == "Atom('abc')"


def test_comments_and_whitespace_are_ignored():
    text = """
    %% rabbitmq.config
    [ % the list
      {rabbit, []}, % trailing comment
      %% {rabbitmq_shovel, []}
      {a, "100% sure"}
    ].
    % done
    """
    assert value(text) == [(Atom("rabbit"), []), (Atom("a"), "100% sure")]


def test_terms_record_their_line_and_column():
    term = parse_one('[\n  {shovels,\n     [x]}\n].')
    shovels = term.items[0]
    assert (term.line, term.column) == (1, 1)
    assert (shovels.line, shovels.column) == (2, 3)
    assert (shovels.items[1].line, shovels.items[1].column) == (3, 6)
    assert shovels.items[0].describe() == "atom 'shovels'"


def test_several_terms_each_end_with_a_dot():
    assert [to_python(t) for t in parse("a. {b}.\n[c].")] == [Atom("a"), (Atom("b"),), [Atom("c")]]
    assert parse("  % nothing\n") == []


BAD = [
    # (text, line, column, message)
    ('[\n{a,\n b},\n\n\n\n {c, "never closed}\n].', 7, 6, "unterminated string"),
    ("[\n  'quoted atom\n].", 2, 3, "unterminated quoted atom"),
    ('{a, <<"bin"\n}.', 2, 1, "expected ',' or '>>' in binary, found '}'"),
    ('{a, <<"bin",', 1, 5, "unterminated binary"),
    ("[a, b]", 1, 7, "expected '.' after the term, found 'end of input'"),
    ("[a, b] c.", 1, 8, "expected '.' after the term, found 'c'"),
    ("[a b].", 1, 4, "expected ',' or ']' in list, found 'b'"),
    ("{a, b.", 1, 6, "expected ',' or '}' in tuple, found '.'"),
    ("[\n  Var\n].", 2, 3, "variables are not allowed"),
    ("[_].", 1, 2, "variables are not allowed"),
    ("#{a => 1}.", 1, 1, "maps and records are not supported"),
    ("[a | b].", 1, 4, "improper lists ([H | T]) are not supported"),
    ("37#1.", 1, 1, "integer base must be 2..36, got 37"),
    ("16#.", 1, 4, "expected base-16 digits after '#'"),
    ("1e5.", 1, 1, "bad number '1e'"),
    ('"bad \\x1".', 1, 6, "bad \\xHH escape"),
    ('"bad \\x{zz}".', 1, 6, "bad \\x{...} escape"),
    ("<<256>>.", 1, 3, "binary byte out of range: 256"),
    ('<<"\u263a">>.', 1, 3, "binary string has characters above 255; add /utf8"),
    ('<<"a"/float>>.', 1, 3, "unsupported binary segment type 'float'"),
    ("[a, ?].", 1, 5, "unexpected character '?'"),
    ("", 1, 1, "expected exactly one term, found no term"),
    ("a. b.", 1, 4, "expected exactly one term, found 2 terms"),
    ("[a,", 1, 4, "unexpected end of input, expected a term"),
]


@pytest.mark.parametrize("text,line,column,message", BAD)
def test_bad_input_reports_line_and_column(text, line, column, message):
    with pytest.raises(ErlangSyntaxError) as info:
        parse_one(text, "rabbitmq.config")
    error = info.value
    assert message in error.message
    assert (error.line, error.column) == (line, column)
    assert str(error) == f"rabbitmq.config:{line}:{column}: {error.message}"
