"""The "before" evaluation loop with a fake backend: prompts, grammar, metrics, files, cache."""

import json

import pandas as pd
import pytest

from mags_lib import protocol
from mags_lib.backends import Generation
from mags_lib.evaluate import EvalConfig, evaluate_sets, sample_rows


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

    def generate(self, prompts, *, max_new_tokens=64, temperature=0.0, grammar=None, stop=None, seed=None):
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
    df = evaluate_sets(sets, tmp_path, EvalConfig(n_per_set=0, embedder="hash", batch_size=3, few_shot=2),
                       backend=be, progress=False)
    assert list(df["mode"]) == ["free", "grammar", "free", "grammar"]
    grammar_rows = df[df["mode"] == "grammar"]
    assert (grammar_rows["adherence"] == 1.0).all() and (grammar_rows["exact_f1"] == 1.0).all()
    free = df[df["mode"] == "free"]
    assert list(free["adherence"]) == [4 / 6, 4 / 6]  # the 2 chatty outputs of 6 per set do not adhere
    assert {c["grammar"] for c in be.calls} == {None, protocol.GRAMMARS["ask"], protocol.GRAMMARS["write"]}
    assert all(c["temperature"] == 0.0 for c in be.calls)
    for f in ("table.csv", "by_kind.csv", "metrics.json", "predictions_gen_ask_free.jsonl"):
        assert (tmp_path / f).exists()
    by_kind = pd.read_csv(tmp_path / "by_kind.csv")
    assert len(by_kind) == 8
    free_kinds = by_kind[by_kind["mode"] == "free"].set_index(["set", "kind"])["adherence"]
    assert free_kinds.to_dict() == {("gen_ask", "multi"): 1.0, ("gen_ask", "single"): 1 / 3,
                                    ("gen_write", "multi"): 1.0, ("gen_write", "single"): 1 / 3}
    lines = (tmp_path / "predictions_gen_write_grammar.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["cache_key"] and len(lines) == 7

    # a second run with the same model, prompts and rows reuses the predictions
    n_calls = len(be.calls)
    df2 = evaluate_sets(sets, tmp_path, EvalConfig(n_per_set=0, embedder="hash", batch_size=3, few_shot=2),
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


def test_prompts_carry_few_shot_examples(tmp_path):
    sets = {"s": _rows("ask", 2)}
    seen = []

    class Spy(EchoBackend):
        def generate(self, prompts, **kw):
            seen.extend(prompts)
            return super().generate(prompts, **kw)

    evaluate_sets(sets, tmp_path, EvalConfig(n_per_set=0, embedder="hash", few_shot=3, modes=("free",)),
                  backend=Spy({r["input"]: r["response"] for r in sets["s"]}), progress=False)
    assert seen[0] == protocol.build_messages("ask", "input ask 0", few_shot=3)


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
