"""`XPATH 'expr'` terms: XPath 1.0 over the message body parsed as XML, as Artemis evaluates it.

Artemis (`XPathExpression`, `JAXPXPathEvaluator`) compiles the expression once with the JDK's
XPath 1.0 engine, parses each message's text body with a namespace-aware DOM builder that drops
comments and refuses any DOCTYPE (`XmlProvider`), evaluates the expression with the document node
as context and converts the result to a boolean (a non-empty node set, a non-empty string, a
number neither 0 nor NaN). Whatever fails there, from a body that is not XML to an undefined
variable, makes the term FALSE (never unknown); a body-less message gives FALSE as well.

Here libxml2 (through lxml, imported only when a selector uses XPATH) plays the JDK's part. What
the JDK decides when it compiles the expression is checked here first, so that the same
selectors are refused: a function outside XPath 1.0's core library, or called with the wrong
number of arguments, is a compile error; a namespace prefix is bound to nothing (the JDK has no
namespace context there: `//p:a` selects nothing, `p:f()` fails, both FALSE).

Limits (not Artemis's, which has none of its own for this): a body longer than `MAX_XML_BODY`
is not parsed (FALSE; Artemis's XPATH also never sees the body of a large message, 100 KiB by
default), nor is one nested deeper than libxml2's 256 levels. Entities are never expanded nor
loaded and no DTD is read: any DOCTYPE makes the term FALSE, as in Artemis.
"""
from __future__ import annotations

import re
import threading
from typing import Any, Callable, Union

MAX_XML_BODY = 102400
"""Longest body (in bytes; characters for a `str`) that XPATH parses; a longer one is FALSE."""

Body = Union[bytes, bytearray, memoryview, str, None]

# XPath 1.0 core function library, with the number of arguments each takes (None: no maximum)
CORE_FUNCTIONS: dict[str, tuple[int, int | None]] = {
    "last": (0, 0), "position": (0, 0), "count": (1, 1), "id": (1, 1),
    "local-name": (0, 1), "namespace-uri": (0, 1), "name": (0, 1),
    "string": (0, 1), "concat": (2, None), "starts-with": (2, 2), "contains": (2, 2),
    "substring-before": (2, 2), "substring-after": (2, 2), "substring": (2, 3),
    "string-length": (0, 1), "normalize-space": (0, 1), "translate": (3, 3),
    "boolean": (1, 1), "not": (1, 1), "true": (0, 0), "false": (0, 0), "lang": (1, 1),
    "number": (0, 1), "sum": (1, 1), "floor": (1, 1), "ceiling": (1, 1), "round": (1, 1),
}
# accepted by the JDK's engine (Xalan's function table) but not XPath 1.0, so not by libxml2
_XALAN_ONLY = frozenset({"current", "generate-id", "unparsed-entity-uri", "system-property",
                         "function-available", "element-available", "document-location",
                         "here"})
_NODE_TYPES = frozenset({"comment", "text", "processing-instruction", "node"})
_OPERATOR_NAMES = frozenset({"and", "or", "mod", "div"})
# a namespace no document uses: what an unbound prefix stands for
_UNBOUND = "urn:rtroute:selector:unbound-prefix"
_XML_RENAMED = "rtroute-xml"

_NAME = r"[^\W\d][\w.\-]*"
_TOKEN = re.compile(
    r"\s*(?:(?P<literal>\"[^\"]*\"|'[^']*')"
    r"|(?P<number>\d+(?:\.\d*)?|\.\d+)"
    rf"|(?P<name>{_NAME}(?::(?:\*|{_NAME}))?)"
    r"|(?P<op>//|::|\.\.|!=|<=|>=|[()\[\].@,|+\-=<>*/$]))")
_FOLLOWER = re.compile(r"\s*(\(|::)?")  # what tells a function name or an axis from a name test


class XPathCompileError(ValueError):
    """An XPath expression that Artemis would refuse when it compiles the selector."""


def check(expression: str) -> tuple[str, frozenset[str]]:
    """Refuse what the JDK's XPath compiler refuses and libxml2 would not, find the prefixes.

    Follows XPath 1.0's lexical rules (section 3.7): a name after an operand is an operator
    name; a name before `(` is a function or node type, before `::` an axis.

    Returns:
        (expression, prefixes): the expression with the `xml` prefix renamed (libxml2 binds it
        whatever the namespaces given, the JDK leaves it unbound), and the prefixes it uses.

    Raises:
        XPathCompileError: on an unknown function, a wrong number of arguments, or a name
            where an operator is due (`1e3`: XPath 1.0 numbers have no exponent).
    """
    prefixes: set[str] = set()
    renamed: list[int] = []  # where an `xml:` prefix starts
    calls: list[list[Any]] = []  # per open '(' or '[': [function name or None, args, empty]
    after_operand = False
    at, n = 0, len(expression)
    while at < n:
        match = _TOKEN.match(expression, at)
        if match is None or match.end() == at:
            break  # left to libxml2's compiler, which reports it
        at = match.end()
        kind = match.lastgroup
        text = match.group(kind)
        if calls and calls[-1][2] and not (kind == "op" and text == ")"):
            calls[-1][2] = False
        if kind == "name":
            if after_operand:
                if text in _OPERATOR_NAMES:
                    after_operand = False
                    continue
                raise XPathCompileError(
                    f"invalid XPath expression: expected an operator before {text!r}")
            follower = _FOLLOWER.match(expression, at)
            prefix, _, local = text.rpartition(":")
            if prefix == "xml":
                renamed.append(match.start(kind))
                prefix = _XML_RENAMED
            if prefix:
                prefixes.add(prefix)
            if follower.group(1) == "(":
                if not prefix and local not in _NODE_TYPES:
                    _check_function(local)
                calls.append([None if prefix or local in _NODE_TYPES else local, 0, True])
                at = follower.end()
                after_operand = False
                continue
            after_operand = follower.group(1) is None
            continue
        if kind in ("literal", "number"):
            after_operand = True
            continue
        if text in ("(", "["):
            calls.append([None, 0, True])
        elif text == "," and calls:
            calls[-1][1] += 1
        elif text in (")", "]") and calls:
            name, commas, empty = calls.pop()
            if name is not None:
                _check_arity(name, 0 if empty else commas + 1)
        if text == "*":
            after_operand = not after_operand  # a name test where an operand is due
        else:
            after_operand = text in (")", "]", ".", "..")
    for start in reversed(renamed):
        expression = expression[:start] + _XML_RENAMED + expression[start + 3:]
    return expression, frozenset(prefixes)


def _check_function(name: str) -> None:
    if name in CORE_FUNCTIONS:
        return
    if name in _XALAN_ONLY:
        raise XPathCompileError(
            f"XPath function {name}() is a Xalan extension, not XPath 1.0: not supported")
    raise XPathCompileError(f"unknown XPath function {name}()")


def _check_arity(name: str, count: int) -> None:
    low, high = CORE_FUNCTIONS[name]
    if count < low or (high is not None and count > high):
        if high is None:
            wanted = f"at least {low}"
        elif low == high:
            wanted = str(low)
        else:
            wanted = f"{low} to {high}"
        plural = "" if wanted == "1" else "s"
        raise XPathCompileError(
            f"XPath function {name}() takes {wanted} argument{plural}, not {count}")


def compile_xpath(expression: str) -> Callable[[Body], bool]:
    """Compile an XPATH term once; the result tells whether a body satisfies it.

    Args:
        expression: the XPath 1.0 expression (the string literal after XPATH).

    Returns:
        `evaluate(body) -> bool`: FALSE for a missing body, one over `MAX_XML_BODY`, one that
        is not well-formed XML or holds a DOCTYPE, and for an evaluation that fails.

    Raises:
        XPathCompileError: when the expression is malformed or refused as Artemis refuses it.
    """
    expression, prefixes = check(expression)
    etree = _lxml()
    options = {"namespaces": dict.fromkeys(prefixes, _UNBOUND), "regexp": False,
               "smart_strings": False}
    try:
        etree.XPath(expression, **options)
    except etree.XPathError as exc:
        raise XPathCompileError(f"invalid XPath expression: {exc}") from None
    # lxml evaluates from the root element; Artemis from the document node. A valid expression
    # stays valid, with the same meaning, as an argument, and the predicate of `(/)` evaluates
    # it with the document node as context (position and size 1, as at the top level).
    compiled = etree.XPath(f"boolean((/)[boolean({expression})])", **options)

    def evaluate(body: Body) -> bool:
        if body is None:
            return False
        document = _document(body)
        if document is None:
            return False
        try:
            return compiled(document)
        except Exception:  # noqa: BLE001 - Artemis: any failure to evaluate is no match
            return False

    return evaluate


_parsers: dict[str, Any] = {}
_last = threading.local()


def _lxml() -> Any:
    """lxml.etree, with the two hardened parsers made on first use."""
    try:
        from lxml import etree
    except ImportError:  # pragma: no cover - lxml is a dependency of rtroute
        raise XPathCompileError("XPATH selectors need lxml (pip install lxml)") from None
    if not _parsers:
        hardened = {"resolve_entities": False, "no_network": True, "load_dtd": False,
                    "dtd_validation": False, "huge_tree": False, "remove_comments": True,
                    "attribute_defaults": False}
        # a str body is already decoded: like Java's StringReader, ignore the declared encoding
        _parsers["str"] = etree.XMLParser(encoding="utf-8", **hardened)
        _parsers["bytes"] = etree.XMLParser(**hardened)
    return etree


def _document(body: Body) -> Any:
    """The parsed body (an lxml ElementTree), or None when XPATH cannot see it.

    The last body parsed on each thread is kept, so that several XPATH terms (or selectors) on
    one message parse it once.
    """
    last = getattr(_last, "pair", None)
    if last is not None and last[0] is body:
        return last[1]
    document = _parse(body)
    if body.__class__ is bytes or body.__class__ is str:  # immutable: safe to reuse
        _last.pair = (body, document)
    return document


def _parse(body: Body) -> Any:
    from lxml import etree

    try:
        if isinstance(body, str):
            if len(body) > MAX_XML_BODY:
                return None
            root = etree.fromstring(body.encode("utf-8"), _parsers["str"])
        elif isinstance(body, (bytes, bytearray, memoryview)):
            if (body.nbytes if isinstance(body, memoryview) else len(body)) > MAX_XML_BODY:
                return None
            root = etree.fromstring(bytes(body), _parsers["bytes"])
        else:
            return None  # not a text body: Artemis's getBodyAs(String) gives null
    except Exception:  # noqa: BLE001 - not XML (or not text): Artemis's XPATH is FALSE then
        return None
    document = root.getroottree()
    info = document.docinfo
    if info.doctype or info.internalDTD is not None or info.externalDTD is not None:
        return None  # Artemis's parser refuses any DOCTYPE (disallow-doctype-decl)
    return document
