"""Reward functions: table-driven cases (one comment per case), TRL signature, purity, pickling."""

import pickle

import pytest

from mags_lib.rewards import REGISTRY, get_reward

ASK_GOLD = "<memory_ask>blorps diet</memory_ask>"
WRITE_GOLD = ("<memory_write>Blorps,eat,frozen lemons</memory_write>"
              "<memory_write>Blorps,live in,copper caves</memory_write>")
CTX = [["blorps", "eat", "frozen lemons"], ["blorps", "live in", "copper caves"],
       ["quindles", "are afraid of", "purple umbrellas"], ["Odalie", "works as", "glassblower"],
       ["Teal Bridge", "is near", "Vornak Hollow"]]
GOLD_FACT = [["blorps", "eat", "frozen lemons"]]

CASES = [
    # ---- format
    # strict ask output for the ask role
    ("format", {"role": "ask"}, ASK_GOLD, 1.0),
    # the empty output is well-formed (nothing to ask)
    ("format", {"role": "ask"}, "", 1.0),
    # chatter around a tag: only the lenient parser recovers it
    ("format", {"role": "ask"}, "Sure! " + ASK_GOLD, 0.5),
    # unclosed last tag: lenient recovery
    ("format", {"role": "ask"}, "<memory_ask>blorps diet", 0.5),
    # plain prose: nothing usable
    ("format", {"role": "write"}, "Blorps eat frozen lemons.", 0.0),
    # a write with two fields is not a triplet
    ("format", {"role": "write"}, "<memory_write>Blorps,eat</memory_write>", 0.0),
    # a write tag in an ask output is not strict, and the lenient parser drops it
    ("format", {"role": "ask"}, "<memory_write>a,b,c</memory_write>", 0.0),
    # ---- role
    # only tags of the right role
    ("role", {"role": "write"}, WRITE_GOLD, 1.0),
    # one right and one wrong tag
    ("role", {"role": "ask"}, ASK_GOLD + "<memory_write>a,b,c</memory_write>", 0.5),
    # no tag at all is not a role error
    ("role", {"role": "ask"}, "", 1.0),
    # all tags of the other role
    ("role", {"role": "ask"}, WRITE_GOLD, 0.0),
    # ---- exact_f1
    # identical to gold
    ("exact_f1", {"role": "write", "response": WRITE_GOLD}, WRITE_GOLD, 1.0),
    # one of two gold triplets, differing only in case and an article: P=1, R=.5
    ("exact_f1", {"role": "write", "response": WRITE_GOLD}, "<memory_write>the blorps,EAT,Frozen lemons</memory_write>",
     2 / 3),
    # a paraphrased object is not an exact match
    ("exact_f1", {"role": "write", "response": WRITE_GOLD}, "<memory_write>Blorps,eat,lemons</memory_write>", 0.0),
    # gold empty and output empty: perfect
    ("exact_f1", {"role": "ask", "response": ""}, "", 1.0),
    # gold empty but the model asked something
    ("exact_f1", {"role": "ask", "response": ""}, ASK_GOLD, 0.0),
    # ---- op_f1 (hash embedder: same words -> high cosine)
    # the same query with an article: semantic match
    ("op_f1", {"role": "ask", "response": ASK_GOLD, "embedder": "hash"}, "<memory_ask>the blorps diet</memory_ask>",
     1.0),
    # an unrelated query
    ("op_f1", {"role": "ask", "response": ASK_GOLD, "embedder": "hash"}, "<memory_ask>quantum tax law</memory_ask>",
     0.0),
    # right content, wrong tag: no same-tag pair
    ("op_f1", {"role": "ask", "response": ASK_GOLD, "embedder": "hash"}, "<memory_write>blorps,diet,x</memory_write>",
     0.0),
    # two predictions for one gold: one-to-one, P=.5 R=1
    ("op_f1", {"role": "ask", "response": ASK_GOLD, "embedder": "hash"}, ASK_GOLD * 2, 2 / 3),
    # ---- ask_retrieval (graph of CTX, top-1, hash embedder)
    # a query about the gold fact retrieves it
    ("ask_retrieval", {"context": CTX, "gold_facts": GOLD_FACT, "embedder": "hash", "k": 1},
     "<memory_ask>what do blorps eat</memory_ask>", 1.0),
    # a query about something else retrieves another fact
    ("ask_retrieval", {"context": CTX, "gold_facts": GOLD_FACT, "embedder": "hash", "k": 1},
     "<memory_ask>Odalie job glassblower</memory_ask>", 0.0),
    # no query while a fact is needed
    ("ask_retrieval", {"context": CTX, "gold_facts": GOLD_FACT, "embedder": "hash", "k": 1}, "", 0.0),
    # nothing needed and nothing asked (gibberish input)
    ("ask_retrieval", {"context": CTX, "gold_facts": [], "embedder": "hash", "k": 1}, "", 1.0),
    # nothing needed but something asked
    ("ask_retrieval", {"context": CTX, "gold_facts": [], "embedder": "hash", "k": 1}, ASK_GOLD, 0.0),
    # ---- length
    # as long as gold: no penalty
    ("length", {"response": ASK_GOLD}, ASK_GOLD, 0.0),
    # 3x gold (108 chars) vs allowance 1.5*36+40=94: 14/200 = -.07
    ("length", {"response": ASK_GOLD}, ASK_GOLD * 3, -0.07),
    # far too long: clipped at -1
    ("length", {"response": ASK_GOLD}, ASK_GOLD * 20, -1.0),
    # no gold column: allowance is the margin alone (40 chars)
    ("length", {}, "x" * 140, -0.5),
    # ---- answer_correct (the game's rule)
    # the alias, in other case and with punctuation
    ("answer_correct", {"aliases": ["frozen lemons"]}, "Frozen lemons!", 1.0),
    # the alias inside a sentence, with an article in front
    ("answer_correct", {"aliases": ["frozen lemons"]}, "They eat the frozen lemons.", 1.0),
    # part of the alias is not the alias
    ("answer_correct", {"aliases": ["frozen lemons"]}, "lemons", 0.0),
    # an alias must match whole words: "cat" is not in "category"
    ("answer_correct", {"aliases": ["cat"]}, "category", 0.0),
    # any of several aliases
    ("answer_correct", {"aliases": ["Zarn", "Captain Zarn"]}, "captain zarn", 1.0),
    # nothing answers and the reader abstains with the protocol's sentence
    ("answer_correct", {"aliases": []}, "I don't know: that is not in my memory.", 1.0),
    # nothing answers but the reader invents an answer
    ("answer_correct", {"aliases": []}, "frozen lemons", 0.0),
    # an answerable question answered with an abstention
    ("answer_correct", {"aliases": ["figs"]}, "I don't know.", 0.0),
    # ---- abstention (the decision only)
    # abstains when nothing answers
    ("abstention", {"aliases": []}, "Not in memory.", 1.0),
    # answers (wrongly, but answers) when something does: the decision is right
    ("abstention", {"aliases": ["figs"]}, "plums", 1.0),
    # abstains although the memory answers
    ("abstention", {"aliases": ["figs"]}, "I do not know", 0.0),
    # answers although nothing does
    ("abstention", {"aliases": []}, "figs", 0.0),
    # selective answering (wrong_answer=-1): a wrong guess costs more than abstaining ...
    ("abstention", {"aliases": ["figs"], "wrong_answer": -1.0}, "plums", -1.0),
    # ... a right answer and a right abstention score as before
    ("abstention", {"aliases": ["figs"], "wrong_answer": -1.0}, "Figs.", 1.0),
    ("abstention", {"aliases": [], "wrong_answer": -1.0}, "Not in memory.", 1.0),
    ("abstention", {"aliases": ["figs"], "wrong_answer": -1.0}, "I do not know", 0.0),
    # ---- brevity (words beyond 1.5 x gold words + 2)
    # as long as gold
    ("brevity", {"response": "frozen lemons"}, "frozen lemons", 0.0),
    # 6 words against an allowance of 5: one word over, -0.1
    ("brevity", {"response": "frozen lemons"}, "they eat frozen lemons every day", -0.1),
    # a rambling answer: clipped at -1
    ("brevity", {"response": "figs"}, "well " * 40, -1.0),
]


def _per_example(kwargs, n):
    """Dataset columns arrive as one value per completion (TRL passes lists)."""
    return {k: ([v] * n if k in {"role", "response", "context", "gold_facts", "aliases"} else v)
            for k, v in kwargs.items()}


@pytest.mark.parametrize("name,kwargs,completion,expected", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_reward_table(name, kwargs, completion, expected):
    fn = REGISTRY[name]
    got = fn([completion], **_per_example(kwargs, 1))
    assert got == [pytest.approx(expected)]
    # the same case as a chat completion (TRL conversational datasets)
    chat = [[{"role": "assistant", "content": completion}]]
    assert fn(chat, **_per_example(kwargs, 1)) == got


def test_every_reward_is_registered_with_a_doctest():
    assert set(REGISTRY) == {"format", "role", "exact_f1", "op_f1", "ask_retrieval", "length", "answer_correct",
                             "abstention", "brevity", "ops_cost", "new_nodes_cost", "new_edges_cost", "churn_cost",
                             "graph_cost", "outcome_write", "outcome_ask", "by_role"}
    for fn in REGISTRY.values():
        assert ">>>" in (fn.__doc__ or ""), fn.__name__


def test_batches_and_extra_trl_kwargs():
    # TRL also passes prompts, completion_ids, trainer_state, ...: they are ignored
    out = REGISTRY["exact_f1"]([WRITE_GOLD, ""], prompts=["p1", "p2"], completion_ids=[[1], [2]],
                               response=[WRITE_GOLD, ""], role=["write", "write"], trainer_state=None)
    assert out == [1.0, 1.0]


def test_rewards_are_pure_and_picklable():
    kw = {"context": [CTX] * 2, "gold_facts": [GOLD_FACT] * 2, "embedder": "hash", "k": 1}
    comps = ["<memory_ask>what do blorps eat</memory_ask>", "<memory_ask>Odalie job</memory_ask>"]
    first = REGISTRY["ask_retrieval"](comps, **kw)
    assert REGISTRY["ask_retrieval"](comps, **kw) == first  # no state carried between calls
    assert REGISTRY["ask_retrieval"](comps[::-1], **{**kw, "context": [CTX] * 2}) == first[::-1]
    for name in REGISTRY:
        f = get_reward(name, embedder="hash") if name in ("op_f1", "ask_retrieval") else get_reward(name)
        g = pickle.loads(pickle.dumps(f))
        assert g.__name__ == REGISTRY[name].__name__


def test_missing_columns_and_bad_lengths_are_clear_errors():
    with pytest.raises(ValueError, match="response"):
        REGISTRY["exact_f1"](["x"], role="ask")
    with pytest.raises(ValueError, match="context"):
        REGISTRY["ask_retrieval"](["x"], gold_facts=[[]], embedder="hash")
    with pytest.raises(ValueError, match="3 values for 2"):
        REGISTRY["format"](["a", "b"], role=["ask"] * 3)
    with pytest.raises(ValueError, match="aliases"):
        REGISTRY["answer_correct"](["x"])
    with pytest.raises(ValueError, match="list of strings"):
        REGISTRY["answer_correct"](["x"], aliases=["figs"])  # one list per completion, not one alias
    with pytest.raises(KeyError, match="choose from"):
        get_reward("bleu")


THREE = ["<memory_write>Blorps,eat,frozen lemons</memory_write>",
         "<memory_write>Blorps,live in,copper caves</memory_write>",
         "<memory_write>Odalie,works as,glassblower</memory_write>"]
WRONG = "<memory_write>Odalie,works as,baker</memory_write>"


@pytest.mark.parametrize("name,kw", [("exact_f1", {}), ("op_f1", {"embedder": "hash"})])
def test_score_min_makes_an_omission_cost_as_much_as_an_error(name, kw):
    gold, two = "".join(THREE), "".join(THREE[:2])
    comps = [gold, two, two + WRONG, gold + WRONG, "", WRONG]
    f1 = get_reward(name, **kw)(comps, response=gold, role="write")
    low = get_reward(name, score="min", **kw)(comps, response=gold, role="write")
    # F1 scores leaving the third fact out (0.8) above stating it wrong (0.67): an incentive to stop early
    assert f1[:3] == [1.0, pytest.approx(0.8), pytest.approx(2 / 3)]
    # min(precision, recall): both cost the same, an extra wrong fact still costs, nothing stated is 0
    assert low == [1.0, pytest.approx(2 / 3), pytest.approx(2 / 3), 0.75, 0.0, 0.0]
    # nothing to store and nothing stored is right under either score; a stored fact then is wrong
    assert get_reward(name, score="min", **kw)(["", WRONG], response="", role="write") == [1.0, 0.0]
    with pytest.raises(ValueError, match="score must be one of"):
        get_reward(name, score="jaccard", **kw)([], response=[], role="write")
