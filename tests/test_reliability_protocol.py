"""The protocol parser on any input: linear time, never raises, escapes round-trip (issue 9, items 8, 9).

Kept probes: parser fuzzing over random and adversarial text (both modes, both roles), the
round-trip property ``parse(writes_to_text(t)) == t`` for arbitrary text fields, and the work the
strict parser does on 1 MB adversarial inputs, counted in characters its scanner examines (no clock).
"""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mags_lib import protocol as P

# -- item 9: escaping ------------------------------------------------------------------------------


@pytest.mark.parametrize("trip", [
    ("C:\\", "is", "a drive"),
    ("a\\,b", "r", "o"),
    ("a\\\\,b", "r\\", "o\\,x"),
    ("Smith, John", "works at, mostly", "ACME, Inc."),
    ("\\", "\\\\", "\\"),
    (",", ",,", ","),
    ("a\\", "\\b", "c"),
])
def test_escaped_fields_round_trip(trip):
    text = P.writes_to_text([trip])
    assert P.parse(text, role="write").triplets == [trip]
    assert P.parse(text, role="write", mode="lenient").triplets == [trip]
    assert P.parse(text, role="write").ok
    op = P.Op("write", "", trip)
    assert P.parse(op.to_text(), role="write").triplets == [trip]


def test_escaping_rule_is_documented_and_exact():
    assert P.escape_field("a\\b,c") == "a\\\\b\\,c"
    assert P.split_triplet("a\\\\,b,c") == ("a\\", "b", "c")  # \\ is a backslash; the comma separates
    assert P.split_triplet("a\\,b,c,d") == ("a,b", "c", "d")
    assert P.split_triplet("C:\\Users,is,home") == ("C:\\Users", "is", "home")  # a lone \ is literal
    assert P.split_triplet("x,y,C:\\,d") == ("x", "y", "C:\\,d")  # the object is verbatim
    for word in ("backslash", "\\\\,"):
        assert word in P.__doc__


field_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="<>"), min_size=1, max_size=12
).filter(lambda s: s.split())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(field_text, field_text, field_text), min_size=1, max_size=3))
def test_writes_round_trip_for_arbitrary_fields(trips):
    norm = [tuple(" ".join(x.split()) for x in t) for t in trips]
    text = P.writes_to_text(trips)
    assert P.parse(text, role="write").triplets == norm
    assert P.parse(text, role="write").ok
    assert re.fullmatch(_gbnf_like_write(), text), text


def _gbnf_like_write() -> str:
    """A regex equivalent of the write grammar's tag shape (fields may use \\, and \\\\ escapes)."""
    esc = r"(?:\\\\|\\,|[^,<>\n\\])"
    field = rf"(?:{esc}|\\(?![\\,]))+"
    return rf"(?:<memory_write>{field},{field},[^<>\n]+</memory_write>)+"


def test_writes_to_text_refuses_what_cannot_round_trip():
    with pytest.raises(ValueError, match="angle bracket"):
        P.writes_to_text([("a<b", "r", "o")])
    with pytest.raises(ValueError, match="empty"):
        P.writes_to_text([("  ", "r", "o")])
    with pytest.raises(ValueError, match="3"):
        P.writes_to_text([("a", "b")])


def test_grammar_allows_escaped_backslash():
    g = P.grammar("write")
    assert '"\\\\\\\\"' in g  # the GBNF literal for two backslashes


# -- item 8: linear time -------------------------------------------------------------------------
MB = 1 << 20
ADVERSARIAL = {
    "unclosed asks": "<memory_ask>q " * (MB // 14),
    "spaces after <": "<" + " " * MB + "x",
    "many < and spaces": "< " * (MB // 2),
    "opening tags of both kinds": "<memory_ask><memory_write>" * (MB // 26),
    "closing tags only": "</memory_ask>" * (MB // 13),
    "nested unclosed": "<memory_write>a,b,c" * (MB // 19) + "</memory_write>",
    "almost tags": "<memory_as" * (MB // 10),
    "slash spaces": "< / " * (MB // 4) + "memory",
    "commas and backslashes": "<memory_write>" + "\\," * (MB // 2) + "</memory_write>",
    "closing tags before opening tags": "</memory_ask>" * (MB // 26) + "<memory_ask>" * (MB // 26),
}
PIECES = {  # text that repeats: work must grow like its length
    "unclosed": "<memory_ask>q ",
    "close then open": "</memory_ask><memory_ask>",
    "pairs": "<memory_write>a,b,c</memory_write> ",
    "mixed": "<memory_ask>x</memory_write><memory_write>\\,,a,b</memory_ask> <",
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_strict_parser_work_is_linear_on_1mb(name):
    text = ADVERSARIAL[name]
    P.SCAN_WORK.reset()
    for role in ("ask", "write", None):
        res = P.parse(text, role=role)
        assert isinstance(res, P.Parsed)
        assert not any("parser error" in p for p in res.problems)
    # every regex the strict parser runs is bounded by its window (no backtracking construct), and
    # the windows of one parse are disjoint up to a constant: <= 8 passes over the input per parse
    assert P.SCAN_WORK.chars <= 3 * 8 * len(text), (P.SCAN_WORK.chars, len(text))
    assert P.SCAN_WORK.calls <= 3 * 8 * (len(text) // 10 + 10)


@pytest.mark.parametrize("name", list(PIECES))
def test_strict_parser_work_grows_linearly(name):
    """Doubling the input at most doubles the work (a quadratic parser would quadruple it)."""
    def work(n):
        P.SCAN_WORK.reset()
        P.parse(PIECES[name] * n, role="ask")
        return P.SCAN_WORK.chars
    w1, w2 = work(2000), work(4000)
    assert w2 <= 2.2 * w1, (w1, w2)


def test_strict_parser_regexes_are_backtracking_free():
    """The patterns the scanner uses: literal tags, and whitespace runs that are possessive."""
    for pat in P.STRICT_PATTERNS:
        src = pat.pattern
        for m in re.finditer(r"(\\s|\.|\[[^\]]*\])([*+?]|\{[^}]*\})(?![+])", src):
            raise AssertionError(f"non-possessive quantifier {m.group(0)!r} in {src!r}")


def test_strict_matches_the_old_definition_on_ordinary_text():
    """Same ops and problems as the regex definition (tags paired with the first matching close)."""
    old = re.compile(r"<(memory_ask|memory_write)>(.*?)</\1>", re.DOTALL)
    rng = random.Random(0)
    pieces = ["<memory_ask>", "</memory_ask>", "<memory_write>", "</memory_write>", "a,b,c", "q", " ",
              "\n", "x", "<", ">", "</", "memory", ",", "\\,"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        got = P.parse(text)
        ref = [(m.group(1), m.group(2)) for m in old.finditer(text)]
        assert len(got.ops) <= len(ref)
        want_ops = []
        for tag, content in ref:
            c = content.strip()
            if not c or "<" in c or ">" in c:
                continue
            if tag == "memory_write" and P.split_triplet(c) is None:
                continue
            want_ops.append(c)
        assert [op.content for op in got.ops] == want_ops, text


# -- fuzzing (kept probe): never raises, always a Parsed --------------------------------------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(list("<>/\\, \n_amemorywriteskq") + ["<memory_ask>", "</memory_ask>",
                                "<memory_write>", "</memory_write>", "\\,", "\\\\"]), max_size=40).map("".join),
       st.sampled_from(["ask", "write", None]), st.sampled_from(["strict", "lenient"]))
def test_parse_never_raises(text, role, mode):
    res = P.parse(text, role=role, mode=mode)
    assert isinstance(res, P.Parsed)
    assert not any("parser error" in p for p in res.problems)
    for op in res.ops:
        assert op.content == op.content.strip() and op.content
        if op.role == "write":
            assert all(op.triplet)
        # every op found re-serialises to text that parses back to the same operation
        back = P.parse(op.to_text(), role=op.role).ops
        assert [(b.role, b.triplet if b.role == "write" else b.content) for b in back] == [
            (op.role, op.triplet if op.role == "write" else op.content)]


def test_parse_of_non_text_and_surrogates():
    assert not P.parse(None).ok and not P.parse(b"<memory_ask>x</memory_ask>").ok
    res = P.parse("<memory_ask>caf\udce9</memory_ask>", role="ask")
    assert res.asks == ["caf\udce9"]
