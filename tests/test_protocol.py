"""The memory protocol: parser tables, round trips, fuzzing, grammars and prompts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mags_lib import protocol as P

W = "<memory_write>{}</memory_write>"
A = "<memory_ask>{}</memory_ask>"

# (text, role, mode, expected ops as (role, content-or-triplet), number of problems)
PARSE_CASES = [
    # empty output is valid: nothing to store
    ("", "write", "strict", [], 0),
    # whitespace only is still the empty output
    ("  \n ", "ask", "strict", [], 0),
    # one well-formed write
    (W.format("Blorps,eat,frozen lemons"), "write", "strict", [("write", ("Blorps", "eat", "frozen lemons"))], 0),
    # two asks separated by a newline: whitespace between tags is allowed
    (A.format("blorp diet") + "\n" + A.format("blorp home"), "ask", "strict",
     [("ask", "blorp diet"), ("ask", "blorp home")], 0),
    # the object keeps extra commas
    (W.format("Paris,is,big, old and busy"), "write", "strict", [("write", ("Paris", "is", "big, old and busy"))], 0),
    # escaped comma in the subject
    (W.format(r"Smith\, John,works at,ACME"), "write", "strict", [("write", ("Smith, John", "works at", "ACME"))], 0),
    # fields are stripped
    (W.format(" Blorps , eat , lemons "), "write", "strict", [("write", ("Blorps", "eat", "lemons"))], 0),
    # chatter before the tag: strict flags it but keeps the op
    ("Sure! " + A.format("blorp diet"), "ask", "strict", [("ask", "blorp diet")], 1),
    # the same chatter is fine in lenient mode
    ("Sure! " + A.format("blorp diet"), "ask", "lenient", [("ask", "blorp diet")], 0),
    # a write with two fields is a problem in both modes
    (W.format("Blorps,eat"), "write", "strict", [], 1),
    (W.format("Blorps,eat"), "write", "lenient", [], 1),
    # a write with an empty field
    (W.format("Blorps,,lemons"), "write", "strict", [], 1),
    # an empty ask tag
    (A.format("  "), "ask", "strict", [], 1),
    # wrong role: an ask tag in a write output
    (A.format("blorp diet"), "write", "strict", [], 1),
    # wrong role in lenient mode: dropped, reported
    (A.format("blorp diet"), "write", "lenient", [], 1),
    # no role given: both tags accepted
    (A.format("q") + W.format("a,b,c"), None, "strict", [("ask", "q"), ("write", ("a", "b", "c"))], 0),
    # unclosed tag: strict problem, lenient recovers to end of line
    ("<memory_ask>blorp diet", "ask", "strict", [], 1),
    ("<memory_ask>blorp diet\nmore chatter", "ask", "lenient", [("ask", "blorp diet")], 0),
    # upper-case tag names: strict problem, lenient fine
    ("<MEMORY_WRITE>a,b,c</MEMORY_WRITE>", "write", "strict", [], 1),
    ("<MEMORY_WRITE>a,b,c</MEMORY_WRITE>", "write", "lenient", [("write", ("a", "b", "c"))], 0),
    # unclosed tag closed by the next opening tag in lenient mode
    ("<memory_ask>one<memory_ask>two</memory_ask>", "ask", "lenient", [("ask", "one"), ("ask", "two")], 0),
    # nested tags are malformed in strict mode
    ("<memory_ask>one<memory_ask>two</memory_ask>", "ask", "strict", [], 1),
    # plain prose: strict problem, lenient finds nothing and reports nothing
    ("Blorps eat lemons.", "write", "strict", [], 1),
    ("Blorps eat lemons.", "write", "lenient", [], 0),
]


@pytest.mark.parametrize("text,role,mode,expected,n_problems", PARSE_CASES)
def test_parse_table(text, role, mode, expected, n_problems):
    p = P.parse(text, role=role, mode=mode)
    got = [(op.role, op.triplet if op.role == "write" else op.content) for op in p.ops]
    assert got == expected
    assert len(p.problems) == n_problems, p.problems
    assert p.ok == (n_problems == 0)


def test_parse_bad_arguments_are_problems_not_exceptions():
    assert not P.parse(None).ok
    assert "unknown parse mode" in P.parse("x", mode="fuzzy").problems[0]
    assert "unknown role" in P.parse("x", role="read").problems[0]


field_text = st.text(alphabet=st.characters(blacklist_characters="<>\n", blacklist_categories=("Cs",)),
                     min_size=1, max_size=20).filter(lambda s: s.strip() and not s.endswith("\\"))


@given(st.lists(st.tuples(field_text, field_text, field_text), max_size=5))
@settings(max_examples=200, deadline=None)
def test_writes_round_trip(triplets):
    text = P.writes_to_text(triplets)
    p = P.parse(text, role="write")
    assert p.ok, (text, p.problems)
    assert p.triplets == [tuple(" ".join(x.split()) for x in t) for t in triplets]


@given(st.lists(field_text, max_size=5))
@settings(max_examples=200, deadline=None)
def test_asks_round_trip(queries):
    p = P.parse(P.asks_to_text(queries), role="ask")
    assert p.ok
    assert p.asks == [" ".join(q.split()) for q in queries]


@given(st.text(max_size=300), st.sampled_from(["ask", "write", None]), st.sampled_from(["strict", "lenient"]))
@settings(max_examples=500, deadline=None)
def test_parser_never_raises(text, role, mode):
    p = P.parse(text, role=role, mode=mode)
    assert isinstance(p.problems, list)
    for op in p.ops:
        assert op.content.strip()
        if op.role == "write":
            assert op.triplet is not None and all(op.triplet)


tag_soup = st.lists(st.sampled_from(["<memory_ask>", "</memory_ask>", "<memory_write>", "</memory_write>",
                                     "a,b,c", ",", "x", " ", "\n", "<", ">", "\\,", "MEMORY_ASK"]),
                    max_size=30).map("".join)


@given(tag_soup, st.sampled_from(["ask", "write", None]), st.sampled_from(["strict", "lenient"]))
@settings(max_examples=500, deadline=None)
def test_parser_never_raises_on_tag_soup(text, role, mode):
    P.parse(text, role=role, mode=mode)


@pytest.mark.parametrize("raw,norm", [
    ("The Blorps", "blorps"),            # article and case
    ("an apple, a pear", "apple pear"),  # articles and punctuation
    ("  Teal   Bridge. ", "teal bridge"),  # whitespace and trailing punctuation
    ("theory", "theory"),                # 'the' inside a word is kept
])
def test_normalize_text(raw, norm):
    assert P.normalize_text(raw) == norm


def test_build_messages():
    msgs = P.build_messages("answer", "What do blorps eat?", facts=["blorps eat lemons"])
    assert msgs[0]["role"] == "system" and "Memory:\n1. blorps eat lemons" in msgs[-1]["content"]
    assert P.build_messages("answer", "q")[-1]["content"].startswith("Memory: (no relevant facts)")
    few = P.build_messages("write", "x", few_shot=99)
    assert len(few) == 2 + 2 * len(P.FEW_SHOT["write"])
    with pytest.raises(ValueError, match="unknown role"):
        P.build_messages("read", "x")
    with pytest.raises(ValueError, match="only used by the 'answer'"):
        P.build_messages("write", "x", facts=["f"])


@pytest.mark.parametrize("role", ["ask", "write"])
def test_few_shot_examples_follow_the_protocol(role):
    for _, out in P.FEW_SHOT[role]:
        assert P.parse(out, role=role).ok


@pytest.mark.parametrize("role", ["ask", "write"])
def test_grammar_shape(role):
    g = P.grammar(role, min_ops=1, max_ops=3)
    assert g.startswith("root ::= (op (op (op)?)?)\n")
    assert P.grammar(role, max_ops=2).startswith("root ::= (op (op)?)?\n")
    with pytest.raises(ValueError):
        P.grammar(role, min_ops=3, max_ops=2)
    # the default grammars are the bounded ones
    assert P.GRAMMARS[role] == P.grammar(role, max_ops=8)


# -- every string the grammars accept parses strictly (no model needed) --------------------
_SPACES = "".join(c for c in map(chr, range(0x3001)) if c.isspace())


def _chars(exclude: str):
    from hypothesis import strategies as st

    return st.characters(blacklist_characters=exclude, blacklist_categories=("Cs",))


def _field(max_len: int, start_exclude: str, rest_exclude: str, escaped_comma: bool):
    from hypothesis import strategies as st

    start = _chars(start_exclude + _SPACES)
    rest = _chars(rest_exclude)
    if escaped_comma:
        start, rest = st.one_of(start, st.just("\\,")), st.one_of(rest, st.just("\\,"))
    return st.builds(lambda a, r: a + "".join(r), start, st.lists(rest, max_size=max_len - 1))


def _grammar_strings(role: str):
    from hypothesis import strategies as st

    if role == "ask":
        op = _field(40, "<>", "<>\n", False).map(lambda q: f"<memory_ask>{q}</memory_ask>")
    else:
        fld = _field(40, ",<>\\", ",<>\n\\", True)
        obj = _field(64, "<>", "<>\n", False)
        op = st.tuples(fld, fld, obj).map(lambda t: f"<memory_write>{t[0]},{t[1]},{t[2]}</memory_write>")
    return st.lists(op, max_size=4).map(lambda ops: ("".join(ops), len(ops)))


@pytest.mark.parametrize("role", ["ask", "write"])
def test_grammar_language_parses_strictly(role):
    """Strings built with the character classes of :func:`mags_lib.protocol.grammar` (fields that start with
    no whitespace of any kind, escaped commas, angle brackets excluded) always parse strictly."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_grammar_strings(role))
    def check(sample):
        text, n = sample
        parsed = P.parse(text, role=role, mode="strict")
        assert parsed.ok, (text, parsed.problems)
        assert len(parsed.ops) == n

    check()
