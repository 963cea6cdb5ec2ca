"""The memory protocol: parser tables, round trips, fuzzing, grammars and prompts."""

import re

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
    # lenient mode drops quotes that wrap the content or a field, and only those
    (W.format('Gus,is named,"Old Tom"'), "write", "lenient", [("write", ("Gus", "is named", "Old Tom"))], 0),
    (W.format('"Bob", likes, "jazz"'), "write", "lenient", [("write", ("Bob", "likes", "jazz"))], 0),
    (W.format('"Bob,likes,jazz"'), "write", "lenient", [("write", ("Bob", "likes", "jazz"))], 0),
    (W.format("Bob's dog,is,Rex"), "write", "lenient", [("write", ("Bob's dog", "is", "Rex"))], 0),
    (A.format('Where is "Old Tom"'), "ask", "lenient", [("ask", 'Where is "Old Tom"')], 0),
    (A.format('"Where is Bob?"'), "ask", "lenient", [("ask", "Where is Bob?")], 0),
    # strict mode keeps them verbatim
    (W.format('Gus,is named,"Old Tom"'), "write", "strict", [("write", ("Gus", "is named", '"Old Tom"'))], 0),
]


@pytest.mark.parametrize("text,role,mode,expected,n_problems", PARSE_CASES)
def test_parse_table(text, role, mode, expected, n_problems):
    p = P.parse(text, role=role, mode=mode)
    got = [(op.role, op.triplet if op.role == "write" else op.content) for op in p.ops]
    assert got == expected
    assert len(p.problems) == n_problems, p.problems
    assert p.ok == (n_problems == 0)
    for op in p.ops:  # an op's content is what its triplet serialises to (the strict parser reads it back)
        if op.role == "write":
            assert P.parse(W.format(op.content), role="write").triplets == [op.triplet]


@pytest.mark.parametrize("kwargs,names", [
    ({"text": None}, ["NoneType"]),  # not text: the problem names what was given
    ({"text": b"<memory_ask>x</memory_ask>"}, ["bytes"]),
    ({"text": "x", "mode": "fuzzy"}, ["'fuzzy'", "strict", "lenient"]),  # and what is allowed
    ({"text": "x", "role": "read"}, ["'read'", "ask", "write"]),
])
def test_bad_arguments_get_a_clear_problem(kwargs, names):
    p = P.parse(**kwargs)
    assert not p.ok and p.ops == [] and len(p.problems) == 1
    for name in names:
        assert name in p.problems[0], p.problems
    # a message about the argument, not an internal exception that parse() caught and reported
    assert "Error" not in p.problems[0], p.problems


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


# -- the parser against a reference, on text built to hit its rules -------------------------------------
# Without backslashes: how a backslash escapes a comma is defined (and tested) on its own; here the
# structure is the subject. parse() never raises because it turns an internal error into a problem,
# so "it did not raise" proves nothing: these tests compare what it returns with what the rules say.
_NO_TAGS = st.characters(blacklist_characters="<>\\", blacklist_categories=("Cs",))
_piece = st.text(alphabet=_NO_TAGS, max_size=6)  # may be blank, may hold commas and odd whitespace
_ask_tag = st.builds("<memory_ask>{}</memory_ask>".format, _piece)
_write_tag = st.builds("<memory_write>{},{},{}</memory_write>".format, _piece, _piece, _piece)
_short_write = st.builds("<memory_write>{},{}</memory_write>".format, _piece, _piece)
_noise = st.sampled_from(["<memory_ask>", "</memory_ask>", "<memory_write>", "</memory_write>", "<MEMORY_ASK>",
                          "</memory_ask >", "<", ">", ",", " ", "\n", "\u3000", "x", "Sure! "])
_soup = st.lists(st.one_of(_ask_tag, _write_tag, _short_write, _noise, _piece), max_size=8).map("".join)
# ... and text that follows the rules (non-blank fields, any whitespace around and between tags), which
# the soup rarely is: the parser must accept it and return exactly its ops
_word = st.text(alphabet=_NO_TAGS, min_size=1, max_size=6).filter(str.strip)
_ws = st.text(alphabet=st.sampled_from([" ", "\n", "\t", "\r", "\u3000", "\x0b"]), max_size=3)
_valid = st.builds(lambda parts, tail: "".join(w + t for w, t in parts) + tail,
                   st.lists(st.tuples(_ws, st.one_of(st.builds("<memory_ask>{}</memory_ask>".format, _word),
                                                     st.builds("<memory_write>{},{},{}</memory_write>".format,
                                                               _word, _word, _word))), max_size=5), _ws)
_STRICT_TAG = re.compile(r"<(memory_ask|memory_write)>([^<>]*)</\1>")


def _reference_strict(text: str, role):
    """The strict rules of protocol.py, written out: ``(ok, ops)``; ops only when ok."""
    ops, pos = [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return True, ops
        m = _STRICT_TAG.match(text, pos)
        if not m:
            return False, None
        tag_role = "ask" if m[1] == "memory_ask" else "write"
        content = m[2].strip()
        if (role is not None and tag_role != role) or not content:
            return False, None
        if tag_role == "write":
            fields = content.split(",", 2)
            if len(fields) != 3 or not all(f.strip() for f in fields):
                return False, None
            ops.append(("write", tuple(f.strip() for f in fields)))
        else:
            ops.append(("ask", content))
        pos = m.end()


def _ops(parsed):
    return [(op.role, op.triplet if op.role == "write" else op.content) for op in parsed.ops]


@given(st.one_of(_soup, _valid), st.sampled_from(["ask", "write", None]))
@settings(max_examples=600, deadline=None)
def test_strict_parse_agrees_with_the_rules(text, role):
    ok, ops = _reference_strict(text, role)
    p = P.parse(text, role=role, mode="strict")
    assert p.ok == ok, (text, p.problems)
    if ok:
        assert _ops(p) == ops, text


# lenient mode also strips quotes around a tag's content (a reader would): keep them out of the contents
_plain = st.text(alphabet=st.characters(blacklist_characters="<>\\\"'`", blacklist_categories=("Cs",)),
                 max_size=6)


@given(st.text(alphabet=_NO_TAGS, max_size=40),
       st.one_of(st.builds("<memory_ask>{}</memory_ask>".format, _plain),
                 st.builds("<memory_write>{},{},{}</memory_write>".format, _plain, _plain, _plain)),
       st.text(alphabet=_NO_TAGS, max_size=40))
@settings(max_examples=400, deadline=None)
def test_a_tag_amid_chatter_is_found(before, tag, after):
    """A valid tag with tag-free text around it: lenient mode finds exactly that op and reports
    nothing; strict mode also returns it, and is ok only when the text around it is blank."""
    ok, ops = _reference_strict(tag, None)
    text = before + tag + after
    for role in (None, ops[0][0] if ok else None):
        lenient = P.parse(text, role=role, mode="lenient")
        strict = P.parse(text, role=role, mode="strict")
        if ok:
            assert _ops(lenient) == ops and lenient.ok, (text, lenient.problems)
            assert _ops(strict) == ops, (text, strict.problems)
            assert strict.ok == (not before.strip() and not after.strip()), (text, strict.problems)
        else:  # a blank field: no op in either mode, and both say so
            assert lenient.ops == [] and strict.ops == [] and not lenient.ok and not strict.ok


@given(_soup, st.sampled_from(["ask", "write", None]), st.sampled_from(["strict", "lenient"]))
@settings(max_examples=400, deadline=None)
def test_every_op_found_is_well_formed(text, role, mode):
    p = P.parse(text, role=role, mode=mode)
    for op in p.ops:
        assert role is None or op.role == role
        assert op.content.strip() and "<" not in op.content and ">" not in op.content
        if op.role == "write":
            assert op.triplet is not None and all(f.strip() for f in op.triplet)
    # no more ops than opening tags of any spelling in the text
    assert len(p.ops) <= len(re.findall(r"<\s*memory[_ ]?(?:ask|write)\s*>", text, re.IGNORECASE)), text


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
