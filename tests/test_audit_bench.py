"""Audit of the benchmark modules' evidence: what their timers cover, what bad input they refuse, and what
their result files record (``mags_lib.bench``: inference, graph, recall_scale, longevity, relations)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mags_lib.backends.base import Generation


# ------------------------------------------------------------------------------------------------
# inference: tokens/s times every prompt's processing for both backends
class _FakeBackend:
    """A backend whose calls cost ``PROMPT_S`` of prompt processing plus ``TOKEN_S`` per new token; with a prefix
    cache (the llama.cpp backend's default) a prompt equal to the previous call's skips its processing."""

    PROMPT_S, TOKEN_S = 0.5, 0.01
    loads: list[tuple[str, dict]] = []

    def __init__(self, name: str, **kw):
        self.name, self.kw, self.model_path, self._last = name, kw, f"fake-{name}", None
        self.prefix_cache = kw.get("prefix_cache", name == "llamacpp")
        _FakeBackend.loads.append((name, kw))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def generate(self, prompts, *, max_new_tokens, **_kw):
        out = []
        for p in prompts:
            cached = self.prefix_cache and p == self._last
            secs = (0.0 if cached else self.PROMPT_S) + self.TOKEN_S * max_new_tokens
            out.append(Generation(text="x", n_prompt_tokens=10, n_new_tokens=max_new_tokens, seconds=secs))
            self._last = p
        return out


def test_tokens_per_second_times_prompt_processing_for_llamacpp_too(monkeypatch):
    """The warm-up prompt is also the first timed prompt: with the llama.cpp backend's prefix cache on, that
    prompt (and the system block of the others) was a cache hit, so llama.cpp's tokens/s left out prompt
    processing that transformers' included, inflating the ratio."""
    import mags_lib.backends as backends
    from mags_lib.bench.inference import TOKENS_PROMPTS, bench_tokens_per_second

    _FakeBackend.loads = []
    monkeypatch.setattr(backends, "load_backend", lambda name, **kw: _FakeBackend(name, **kw))
    res = bench_tokens_per_second(["transformers", "llamacpp"], prompts=TOKENS_PROMPTS[:3], max_new_tokens=8,
                                  threads=1)
    # the same work at the same cost: the same seconds and rate for both
    assert res["llamacpp"]["seconds"] == pytest.approx(res["transformers"]["seconds"])
    assert res["ratio_llamacpp_over_transformers"] == pytest.approx(1.0)
    assert dict(_FakeBackend.loads)["llamacpp"].get("prefix_cache") is False
    assert res["llamacpp"]["prefix_cache"] is False


# ------------------------------------------------------------------------------------------------
# graph: counts that measure nothing are refused before any graph is built; the JSON records its commit
@pytest.mark.parametrize("arg", [["--ticks", "0"], ["--queries", "0"], ["--queries", "-3"],
                                 ["--engram-triplets", "0"], ["--edges-per-node", "-1"]])
def test_graph_cli_refuses_counts_that_measure_nothing(tmp_path, capsys, arg):
    """Before: --ticks 0 / --queries 0 crashed with IndexError after building and measuring every size (minutes at
    1M nodes), and --engram-triplets 0 wrote an engram rate of 0 triplets/s as a figure."""
    from mags_lib.bench import graph as bench

    with pytest.raises(SystemExit) as e:
        bench.main(["--sizes", "300", "--embedder", "none", "--out", str(tmp_path), *arg])
    assert e.value.code == 2
    assert arg[0] in capsys.readouterr().err
    assert not (tmp_path / "graph.json").exists()
    with pytest.raises(ValueError, match=arg[0].lstrip("-").replace("-", "_")):
        bench.run([300], out_dir=tmp_path, embedder="none", verbose=False,
                  **{arg[0].lstrip("-").replace("-", "_"): int(arg[1])})


def test_graph_json_records_the_commit(tmp_path):
    from mags_lib.bench import graph as bench

    bench.run([30, 60], out_dir=tmp_path, queries=5, engram_triplets=20, engram_batches=[10], ticks=1,
              embedder="none", verbose=False)
    saved = json.loads((tmp_path / "graph.json").read_text())
    assert "git_sha" in saved["meta"] and saved["meta"]["written_at"]


# ------------------------------------------------------------------------------------------------
# recall_scale: query counts checked; a run without LoCoMo does not replace a LoCoMo result
def _tiny_locomo(tmp_path: Path) -> Path:
    """A LoCoMo file of one conversation (three turns) and six questions."""
    conv = {"speaker_a": "Jon", "speaker_b": "Gina", "session_1_date_time": "4:04 pm on 20 January, 2023",
            "session_1": [{"speaker": "Jon", "dia_id": "D1:1", "text": "I lost my job as a banker."},
                          {"speaker": "Gina", "dia_id": "D1:2", "text": "I opened a clothing store."}],
            "session_2_date_time": "12:15 am on 2 February, 2023",
            "session_2": [{"speaker": "Jon", "dia_id": "D2:1", "text": "I opened a dance studio."}]}
    qa = [{"question": q, "answer": a, "evidence": [e], "category": 4}
          for q, a, e in [("What was Jon's job?", "banker", "D1:1"), ("What did Gina open?", "a store", "D1:2"),
                          ("What did Jon open?", "a dance studio", "D2:1"), ("Who lost a job?", "Jon", "D1:1"),
                          ("Who owns a store?", "Gina", "D1:2"), ("Where does Jon dance?", "his studio", "D2:1")]]
    p = tmp_path / "locomo.json"
    p.write_text(json.dumps([{"sample_id": "c1", "conversation": conv, "qa": qa}]))
    return p


def test_recall_scale_refuses_nonpositive_counts(tmp_path, capsys):
    """Before: queries=-2 sliced the question list with [:-2] and timed all questions but two, silently."""
    from mags_lib.bench import recall_scale as R

    for bad in ({"queries": -2}, {"queries": 0}, {"copies": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            R.measure(data=str(tmp_path / "missing.json"), variants=(), ks=(10,), progress=lambda m: None,
                      **{"copies": 1, "queries": 3, **bad})
    for arg in (["--queries", "-2"], ["--copies", "0"], ["--synthetic", "-5"]):
        with pytest.raises(SystemExit) as e:
            R.main([*arg, "--out", str(tmp_path / "x.json")])
        assert e.value.code == 2
    with pytest.raises(ValueError, match="queries"):
        R.measure_synthetic(100, queries=0, ks=(10,), variants=(), progress=lambda m: None)


def test_recall_scale_fewer_queries_than_the_warm_up(tmp_path):
    """Before: fewer than 5 queries failed with IndexError in the warm-up."""
    from mags_lib.bench import recall_scale as R

    r = R.measure(copies=1, queries=3, data=str(_tiny_locomo(tmp_path)), variants=(), ks=(10,),
                  progress=lambda m: None)
    assert r["queries"] == 3 and r["latency_ms"]["default k=10"]["p50"] > 0
    s = R.measure_synthetic(60, queries=2, ks=(10,), variants=(), progress=lambda m: None)
    assert s["queries"] == 2


def test_recall_scale_without_locomo_keeps_an_earlier_locomo_result(tmp_path):
    """Before: a run that could not find LoCoMo wrote ``{"skipped": ...}`` over the file, replacing the figures
    measured on LoCoMo (the README's 47k-episode latencies) with nothing."""
    from mags_lib.bench import recall_scale as R

    out = tmp_path / "locomo_recall_scale.json"
    earlier = json.dumps({"n_episodes": 47056, "latency_ms": {"default k=10": {"p95": 1.9}}})
    out.write_text(earlier)
    missing = str(tmp_path / "nowhere" / "locomo10.json")
    assert R.main(["--data", missing, "--synthetic", "0", "--out", str(out)]) == 1
    assert out.read_text() == earlier
    assert R.main(["--data", missing, "--synthetic", "60", "--queries", "2", "--out", str(out)]) == 1
    assert out.read_text() == earlier
    other = tmp_path / "synthetic_only.json"  # a new file: the synthetic part is written, the skip said
    assert R.main(["--data", missing, "--synthetic", "60", "--queries", "2", "--out", str(other)]) == 0
    saved = json.loads(other.read_text())
    assert "skipped" in saved and saved["synthetic"]["n_nodes"] == 60 and "git_sha" in saved


# ------------------------------------------------------------------------------------------------
# longevity: turn counts checked before the first simulation
def test_longevity_refuses_turn_counts_it_cannot_measure(tmp_path, capsys):
    """Before: n_turns=0 wrote NaN shares for every case; --turns 601 failed with ValueError after the first
    simulations; --seeds ',' failed with ValueError from int('')."""
    from mags_lib.bench import longevity as L

    for arg in (["--turns", "0"], ["--turns", "601"], ["--seeds", ","]):
        with pytest.raises(SystemExit) as e:
            L.main([*arg, "--out", str(tmp_path)])
        assert e.value.code == 2
    for kw in ({"n_turns": 0}, {"n_turns": 601}, {"seeds": []}):
        with pytest.raises(ValueError):
            L.run(out_dir=tmp_path, horizons=(8,), decay_rates=(0.01,), progress=False, **{"seeds": [0], **kw})
    assert not (tmp_path / "longevity.json").exists()


# ------------------------------------------------------------------------------------------------
# relations: the JSON says which embedder made it, and is JSON
def test_relations_json_records_its_embedder_and_is_strict_json(tmp_path):
    """Before: the file held neither the embedder (MiniLM and hash figures indistinguishable) nor the commit, and
    wrote undefined precisions as NaN, which strict JSON parsers reject."""
    from mags_lib.bench import relations as R

    out = tmp_path / "relations.json"
    R.main(["--embedder", "hash", "--out", str(out)])

    def refuse(c):
        raise ValueError(f"not JSON: {c}")

    saved = json.loads(out.read_text(), parse_constant=refuse)
    assert saved["meta"]["embedder"] == "hash" and "git_sha" in saved["meta"]
    assert saved["meta"]["thresholds"] == list(R.THRESHOLDS)
    before = saved["before"]["labels_undeclared"]
    assert before["precision"] is None or math.isfinite(before["precision"])
    with pytest.raises(SystemExit):
        R.main(["--embedder", "hash", "--errors", "0.33"])
