"""The "before" evaluation loop with a fake backend: prompts, grammar, metrics, files, cache."""

import json

import pandas as pd
import pytest

from mags_lib import protocol
from mags_lib.backends import Generation
from mags_lib.evaluate import EvalConfig, before_sets, evaluate_sets, sample_rows
from mags_lib.roles import ROLE_SPECS


class EchoBackend:
    """Answers the gold response, with chatter in front for the inputs in ``chatty`` unless decoding
    is constrained by a grammar (which, like a real one, forces the format)."""

    name = "fake"
    supports_grammar = True
    model_path = "fake-model"

    def __init__(self, gold_by_input, chatty=()):
        self.gold = gold_by_input
        self.chatty = set(chatty)
        self.calls = []

    def generate(self, prompts, *, max_new_tokens=64, temperature=0.0, grammar=None, stop=None, seed=None,
                 stop_repeats=False):
        self.calls.append({"n": len(prompts), "grammar": grammar, "temperature": temperature})
        out = []
        for p in prompts:
            text = p[-1]["content"]
            good = grammar is not None or text not in self.chatty
            out.append(Generation(self.gold[text] if good else "I think " + self.gold[text], 10, 5, 0.1))
        return out

    def close(self):
        pass


def _rows(role, n):
    rows = []
    for i in range(n):
        resp = (protocol.asks_to_text([f"thing{i} diet"]) if role == "ask"
                else protocol.writes_to_text([(f"thing{i}", "eat", "moss")]))
        rows.append({"id": f"{role}-{i}", "role": role, "kind": "single" if i % 2 else "multi",
                     "input": f"input {role} {i}", "response": resp})
    return rows


def test_evaluate_sets_writes_table_and_uses_grammar(tmp_path):
    sets = {"gen_ask": _rows("ask", 6), "gen_write": _rows("write", 6)}
    gold = {r["input"]: r["response"] for rows in sets.values() for r in rows}
    # chatty: inputs 1 and 3 of each set, both of kind "single" (odd rows), spread over two batches
    be = EchoBackend(gold, chatty={f"input {role} {i}" for role in ("ask", "write") for i in (1, 3)})
    df = evaluate_sets(sets, tmp_path, EvalConfig(n_per_set=0, embedder="hash", batch_size=3),
                       backend=be, progress=False)
    assert list(df["mode"]) == ["free", "grammar", "free", "grammar"]
    grammar_rows = df[df["mode"] == "grammar"]
    assert (grammar_rows["adherence"] == 1.0).all() and (grammar_rows["exact_f1"] == 1.0).all()
    free = df[df["mode"] == "free"]
    assert list(free["adherence"]) == [4 / 6, 4 / 6]  # the 2 chatty outputs of 6 per set do not adhere
    # the agent's grammar of each role (the base prompt spec's bounds), nothing else
    assert {c["grammar"] for c in be.calls} == {None, ROLE_SPECS["ask"].base.grammar(),
                                                ROLE_SPECS["write"].base.grammar()}
    assert all(c["temperature"] == 0.0 for c in be.calls)
    for f in ("table.csv", "by_kind.csv", "metrics.json", "predictions_gen_ask_free.jsonl"):
        assert (tmp_path / f).exists()
    by_kind = pd.read_csv(tmp_path / "by_kind.csv")
    assert len(by_kind) == 8
    free_kinds = by_kind[by_kind["mode"] == "free"].set_index(["set", "kind"])["adheres_mean"]
    assert free_kinds.to_dict() == {("gen_ask", "multi"): 1.0, ("gen_ask", "single"): 1 / 3,
                                    ("gen_write", "multi"): 1.0, ("gen_write", "single"): 1 / 3}
    lines = (tmp_path / "predictions_gen_write_grammar.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["cache_key"] and len(lines) == 7

    # a second run with the same model, prompts and rows reuses the predictions
    n_calls = len(be.calls)
    df2 = evaluate_sets(sets, tmp_path, EvalConfig(n_per_set=0, embedder="hash", batch_size=3),
                        backend=be, progress=False)
    assert len(be.calls) == n_calls
    pd.testing.assert_frame_equal(df, df2)


def test_cache_is_invalidated_when_the_model_file_changes(tmp_path):
    sets = {"gen_ask": _rows("ask", 2)}
    model = tmp_path / "model.gguf"
    model.write_bytes(b"v1")
    be = EchoBackend({r["input"]: r["response"] for r in sets["gen_ask"]})
    be.model_path = str(model)
    cfg = EvalConfig(n_per_set=0, embedder="hash", modes=("free",))
    out = tmp_path / "out"
    evaluate_sets(sets, out, cfg, backend=be, progress=False)
    n = len(be.calls)
    evaluate_sets(sets, out, cfg, backend=be, progress=False)
    assert len(be.calls) == n  # same file: cached
    model.write_bytes(b"version 2, re-exported to the same path")
    evaluate_sets(sets, out, cfg, backend=be, progress=False)
    assert len(be.calls) > n  # changed file: generated again


class Spy(EchoBackend):
    """Records every prompt it is given."""

    def __init__(self, gold_by_input):
        super().__init__(gold_by_input)
        self.seen = []

    def generate(self, prompts, **kw):
        self.seen.extend(prompts)
        return super().generate(prompts, **kw)


def test_prompts_are_the_role_spec(tmp_path):
    sets = {"s": _rows("ask", 2)}
    spy = Spy({r["input"]: r["response"] for r in sets["s"]})
    seen = spy.seen
    evaluate_sets(sets, tmp_path, EvalConfig(n_per_set=0, embedder="hash", modes=("free",)), backend=spy,
                  progress=False)
    # an untrained model gets the base prompt: the agent's few-shot block and system prompt
    assert seen[0] == ROLE_SPECS["ask"].base.messages("input ask 0")
    assert len(seen[0]) == 2 + 2 * ROLE_SPECS["ask"].base.few_shot
    seen.clear()
    evaluate_sets(sets, tmp_path / "t", EvalConfig(n_per_set=0, embedder="hash", modes=("free",), prompt="trained"),
                  backend=spy, progress=False)
    assert seen[0] == ROLE_SPECS["ask"].trained.messages("input ask 0") and len(seen[0]) == 2


def test_a_trained_model_is_prompted_as_its_meta_says(tmp_path):
    """prompt='auto' reads the run's meta.json: the prompt the model was trained with."""
    run = tmp_path / "models" / "ask" / "r1"
    (run / "sft").mkdir(parents=True)
    odd = ROLE_SPECS["ask"].trained.to_dict() | {"system": "Ask, tersely."}
    (run / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "role": "ask", "prompt": odd,
                                               "final_stage": "sft"}))
    sets = {"s": _rows("ask", 1)}
    spy = Spy({r["input"]: r["response"] for r in sets["s"]})
    spy.model_path = str(run / "sft")
    seen = spy.seen
    evaluate_sets(sets, tmp_path / "o", EvalConfig(n_per_set=0, embedder="hash", modes=("free",)), backend=spy,
                  progress=False)
    assert seen[0][0] == {"role": "system", "content": "Ask, tersely."} and len(seen[0]) == 2


def test_answer_sets_are_scored_by_the_game_rule(tmp_path):
    rows = [
        {"id": "a0", "role": "answer", "kind": "fact", "input": "What do blorps eat?", "response": "frozen lemons",
         "aliases": ["frozen lemons"], "memory": [{"text": "blorps eat frozen lemons", "time": None,
                                                   "current": None, "speaker": None}]},
        {"id": "a1", "role": "answer", "kind": "empty", "input": "Where do blorps live?",
         "response": protocol.ABSTAIN_ANSWER, "aliases": [], "memory": []},
        {"id": "a2", "role": "answer", "kind": "fact", "input": "What do quindles fear?", "response": "bells",
         "aliases": ["bells"], "memory": [{"text": "quindles fear bells", "time": "2023-05-08", "current": None,
                                           "speaker": None}]},
    ]
    replies = {"What do blorps eat?": "They eat frozen lemons.", "Where do blorps live?": "I don't know.",
               "What do quindles fear?": "I don't know."}
    seen = []

    class Reader(EchoBackend):
        def generate(self, prompts, *, stop=None, **kw):
            seen.append(stop)
            return [Generation(replies[p[-1]["content"].rsplit("Question: ", 1)[1]], 10, 3, 0.1) for p in prompts]

    df = evaluate_sets({"gen_answer": rows}, tmp_path, EvalConfig(n_per_set=0, embedder="hash"),
                       backend=Reader({}), progress=False)
    assert list(df["mode"]) == ["free"]  # the answer role has no grammar mode
    row = df.iloc[0]
    assert row["accuracy"] == pytest.approx(2 / 3) and row["answerable_acc"] == 0.5
    assert row["abstain_acc"] == 1.0 and row["false_abstain"] == 0.5
    assert seen == [list(ROLE_SPECS["answer"].base.stop)]


def test_before_sets_skip_missing_seed_data_in_one_line(tmp_path):
    from mags_lib.data import GenerationConfig, build_all

    cfg = GenerationConfig(n_train=6, n_validation=3, n_test=3, worlds_train=2, worlds_validation=1, worlds_test=1)
    stale = tmp_path / "data" / "processed" / "seed_ask_smoke"  # an earlier import, when the folder existed
    (stale / "data").mkdir(parents=True)
    built = build_all("smoke", seed_path=tmp_path / "no-such-folder", config=cfg, root=tmp_path, progress=False)
    assert built["seed_import"] is None and "no-such-folder" in built["seed_skipped"]
    assert not stale.exists() and "seed_ask_smoke" in built["seed_skipped"]  # never mixed with this run
    notes = []
    sets = before_sets("smoke", root=tmp_path, note=notes.append)
    assert sorted(sets) == ["gen_answer_smoke", "gen_ask_smoke", "gen_write_smoke"]
    assert len(notes) == 1 and "seed_ask_smoke" in notes[0] and "seed_syn_dual" in notes[0]


def test_a_seed_folder_without_seed_files_is_skipped_in_one_line(tmp_path):
    """A folder that exists but holds no asks/*.json or writes/*.json (a wrong path, an empty download) is skipped like
    a missing one: build_all crashed in the seed import after saving the generated datasets."""
    from mags_lib.data import GenerationConfig, build_all, seed_skip_message

    empty = tmp_path / "seed_syn_dual"
    (empty / "asks").mkdir(parents=True)
    (empty / "asks" / "notes.txt").write_text("not a seed file")
    msg = seed_skip_message(empty)
    assert msg and str(empty) in msg and "asks/*.json" in msg
    cfg = GenerationConfig(n_train=6, n_validation=3, n_test=3, worlds_train=2, worlds_validation=1, worlds_test=1)
    built = build_all("smoke", seed_path=empty, config=cfg, root=tmp_path, progress=False)
    assert built["seed_import"] is None and built["seed_skipped"] == msg
    assert sorted(built["paths"]) == ["gen_answer_smoke", "gen_ask_smoke", "gen_write_smoke"]


def test_config_and_set_checks(tmp_path):
    with pytest.raises(ValueError, match="modes"):
        EvalConfig(modes=("beam",))
    mixed = {"m": _rows("ask", 1) + _rows("write", 1)}
    with pytest.raises(ValueError, match="one role"):
        evaluate_sets(mixed, tmp_path, EvalConfig(embedder="hash"), backend=EchoBackend({}), progress=False)


def test_sample_rows_is_deterministic_and_ordered():
    rows = [{"i": i} for i in range(50)]
    a = sample_rows(rows, 10, seed=4)
    assert a == sample_rows(rows, 10, seed=4) and [r["i"] for r in a] == sorted(r["i"] for r in a)
    assert sample_rows(rows, 0) == rows and sample_rows(rows, 99) == rows


def _prediction_files(folder):
    """{file name: (header pid, outputs)} of the predictions an evaluation wrote."""
    out = {}
    for path in sorted(folder.glob("predictions_*.jsonl")):
        head, *rows = [json.loads(line) for line in path.read_text().splitlines()]
        out[path.name] = (head["pid"], [r["output"] for r in rows])
    return out


@pytest.mark.slow
def test_worker_processes_decode_what_one_process_decodes(tmp_path):
    """n_jobs=2 on the embedded model: the four (set, mode) jobs are decoded by other processes (their pid in
    the files' headers), to the same outputs and the same table as one process; a second call reads them back."""
    import dataclasses
    import os

    sets = {"gen_ask": _rows("ask", 3), "gen_write": _rows("write", 3)}
    cfg = EvalConfig(n_per_set=0, embedder="hash", max_new_tokens=12, prompt="base")
    one = evaluate_sets(sets, tmp_path / "one", cfg, progress=False)
    two = evaluate_sets(sets, tmp_path / "two", dataclasses.replace(cfg, n_jobs=2), progress=False)
    files_one, files_two = _prediction_files(tmp_path / "one"), _prediction_files(tmp_path / "two")
    assert len(files_two) == 4 and files_two.keys() == files_one.keys()
    assert {pid for pid, _ in files_one.values()} == {os.getpid()}
    assert os.getpid() not in {pid for pid, _ in files_two.values()}
    assert {k: v[1] for k, v in files_two.items()} == {k: v[1] for k, v in files_one.items()}
    timing = ["seconds", "tokens_per_s"]
    pd.testing.assert_frame_equal(one.drop(columns=timing), two.drop(columns=timing))
    again = evaluate_sets(sets, tmp_path / "two", dataclasses.replace(cfg, n_jobs=2), progress=False)
    assert _prediction_files(tmp_path / "two") == files_two  # cached: nothing decoded again
    pd.testing.assert_frame_equal(again, two)


def test_n_jobs_below_one_is_refused():
    with pytest.raises(ValueError, match="n_jobs"):
        EvalConfig(n_jobs=0)


def test_reuse_copies_predictions_only_under_the_same_cache_key(tmp_path):
    """notebook 20's base stage reuses notebook 10's before row: the same key (model, prompt, decoding, rows) is
    copied without decoding; another token budget, or other rows, decode again."""
    sets = {"gen_write": _rows("write", 4)}
    gold = {r["input"]: r["response"] for r in sets["gen_write"]}
    cfg = EvalConfig(n_per_set=0, embedder="hash", modes=("free",))
    first = EchoBackend(gold)
    before = evaluate_sets(sets, tmp_path / "before", cfg, backend=first, progress=False)
    assert first.calls  # decoded once
    reader = EchoBackend(gold)
    base = evaluate_sets(sets, tmp_path / "base", cfg, backend=reader, progress=False, reuse=[tmp_path / "before"])
    assert reader.calls == []  # nothing decoded
    assert (tmp_path / "base" / "predictions_gen_write_free.jsonl").read_text() == \
        (tmp_path / "before" / "predictions_gen_write_free.jsonl").read_text()
    cols = ["adherence", "op_f1", "exact_f1"]
    pd.testing.assert_frame_equal(base[cols], before[cols])
    other = EchoBackend(gold)  # another token budget: another key
    evaluate_sets(sets, tmp_path / "capped", EvalConfig(n_per_set=0, embedder="hash", modes=("free",),
                                                        max_new_tokens=5), backend=other, progress=False,
                  reuse=[tmp_path / "before"])
    assert other.calls
    fewer = EchoBackend(gold)  # other rows: another key
    evaluate_sets({"gen_write": sets["gen_write"][:3]}, tmp_path / "fewer", cfg, backend=fewer, progress=False,
                  reuse=[tmp_path / "before"])
    assert fewer.calls


@pytest.mark.slow
def test_evaluate_run_decodes_in_processes_and_reuses_the_before_row(tmp_path, monkeypatch):
    """training.report.evaluate_run, base stage, on the embedded model: threads=2 decodes in two worker processes
    (the files' pids) what threads=1 decodes in this one; threads=None (the default profile's "every usable core")
    is as many processes as usable cores; with ``base_from`` the same predictions are copied (the worker's pid
    survives in the copy), not decoded again."""
    import os

    import mags_lib.backends.llamacpp_backend as lcb

    from mags_lib.data import GenerationConfig, build_all
    from mags_lib.training.report import evaluate_run

    cfg = GenerationConfig(n_train=6, n_validation=3, n_test=3, worlds_train=2, worlds_validation=1, worlds_test=1)
    build_all("smoke", seed_path=tmp_path / "no-seed", config=cfg, root=tmp_path, progress=False)
    kw = {"n": 2, "stages": ("base",), "embedder": "hash", "max_new_tokens": 8, "data_root": tmp_path,
          "models_root": tmp_path / "models", "progress": False, "note": lambda _: None}
    one = evaluate_run("write", "t", "smoke", tmp_path / "one", threads=1, **kw)
    two = evaluate_run("write", "t", "smoke", tmp_path / "two", threads=2, **kw)
    files_one, files_two = _prediction_files(tmp_path / "one" / "base"), _prediction_files(tmp_path / "two" / "base")
    assert sorted(files_two) == ["predictions_gen_write_smoke_free.jsonl", "predictions_gen_write_smoke_grammar.jsonl"]
    assert {p for p, _ in files_one.values()} == {os.getpid()} and os.getpid() not in {p for p, _ in files_two.values()}
    assert {k: v[1] for k, v in files_two.items()} == {k: v[1] for k, v in files_one.items()}
    timing = ["seconds", "tokens_per_s"]
    pd.testing.assert_frame_equal(one.drop(columns=timing), two.drop(columns=timing))
    monkeypatch.setattr(lcb, "usable_cores", lambda: 2)
    evaluate_run("write", "t", "smoke", tmp_path / "cores", threads=None, **kw)
    files_cores = _prediction_files(tmp_path / "cores" / "base")
    assert os.getpid() not in {p for p, _ in files_cores.values()}
    assert {k: v[1] for k, v in files_cores.items()} == {k: v[1] for k, v in files_one.items()}
    copied = evaluate_run("write", "t", "smoke", tmp_path / "three", threads=1, base_from=tmp_path / "two" / "base",
                          **kw)
    assert _prediction_files(tmp_path / "three" / "base") == files_two
    pd.testing.assert_frame_equal(copied, two)


def test_ask_sets_with_a_context_report_retrieval_and_its_precision(tmp_path):
    # one recall of the queries serves both: recall alone rewarded spraying queries, so precision stands beside it
    from mags_lib.rewards import ask_retrieval_reward

    ctx = [["blorps", "eat", "frozen lemons"], ["blorps", "live in", "copper caves"],
           ["quindles", "fear", "purple umbrellas"], ["Odalie", "works as", "glassblower"]]
    gold = [["blorps", "eat", "frozen lemons"]]
    spray = "".join(f"<memory_ask>{s} {r}</memory_ask>" for s in ("blorps", "quindles", "Odalie")
                    for r in ("eat", "fear", "works as"))
    responses = ["<memory_ask>what do blorps eat</memory_ask>", spray]
    rows = [{"id": f"ask-{i}", "role": "ask", "kind": "single", "input": f"input ask {i}", "response": r,
             "context": ctx, "gold_facts": gold} for i, r in enumerate(responses)]
    be = EchoBackend({r["input"]: r["response"] for r in rows})
    df = evaluate_sets({"gen_ask": rows}, tmp_path, EvalConfig(n_per_set=0, embedder="hash", modes=("free",)),
                       backend=be, progress=False)
    kw = {"context": [ctx] * 2, "gold_facts": [gold] * 2, "embedder": "hash"}
    want_recall = ask_retrieval_reward(responses, score="recall", **kw)
    want_precision = ask_retrieval_reward(responses, score="precision", **kw)
    assert want_recall == [1.0, 1.0] and want_precision[1] < 1.0
    assert df["retrieval"].iloc[0] == pytest.approx(sum(want_recall) / 2)
    assert df["retrieval_precision"].iloc[0] == pytest.approx(sum(want_precision) / 2)
