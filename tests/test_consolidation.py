"""Parametric consolidation (issue 14): selection, rendering, the graph's demote / forget operations,
the adapter versioned with the snapshots, and one tiny real consolidation of SmolLM2 on the CPU.

The fast tests use the hash embedder and never load a language model. The real consolidation
(``slow``) trains a LoRA on a handful of invented facts that the base model cannot know, and checks
that closed-book accuracy on them rises above the base model's, and that rolling back restores the
previous (no) adapter and so the base model's answers.
"""

from __future__ import annotations

import json

import pytest

from mags_lib import MAGS
from mags_lib import protocol as P
from mags_lib.agent import MAGSConfig
from mags_lib.consolidation import (
    ConsolidationConfig,
    Consolidator,
    closed_book_accuracy,
    consolidate,
    fact_questions,
    render_examples,
    select_facts,
)
from mags_lib.embed import HashEmbedder
from mags_lib.graph import LiquidGraph

FACTS = [("Blorps", "eat", "frozen lemons"), ("Quindles", "live in", "Teal Bridge"),
         ("Snarfs", "are afraid of", "purple umbrellas"), ("Zarnok", "guards", "the Moon Gate")]


def _graph(facts=FACTS) -> LiquidGraph:
    g = LiquidGraph(HashEmbedder(dim=64), seed=0)
    for i, t in enumerate(facts):
        g.engram([t], source=f"S{i}")
    return g


def _use(g: LiquidGraph, subject: str, times: int) -> None:
    """Reward the recall of ``subject``'s facts ``times`` times (strength and uses rise)."""
    for _ in range(times):
        res = g.recall(subject, k=4)
        items = [i for i, it in enumerate(res.items) if it.triplet and it.triplet[0] == subject]
        g.reinforce(res, 1.0, items=items)


# ------------------------------------------------------------------------------------------------
# configuration
@pytest.mark.parametrize("kw, word", [
    ({"after": "delete"}, "after"),                      # not demote | prune | keep
    ({"min_strength": 1.5}, "min_strength"),             # strengths are in (0, 1]
    ({"min_uses": -1}, "min_uses"),
    ({"max_steps": 0}, "max_steps"),
    ({"negatives_ratio": -0.1}, "negatives_ratio"),
    ({"demote_factor": 0.0}, "demote_factor"),           # 0 would zero the edge
    ({"valid_only": False}, "superseded"),               # never consolidate a superseded fact
    ({"question_templates": ("What is {X}?",)}, "{S}"),  # a template needs the subject
    ({"question_templates": ("What {S} {Q}?",)}, "only use"),
    ({"statements_per_fact": 3}, "statement_templates"),
    ({"threads": 0}, "threads"),
    ({"every_n_observations": True}, "every_n_observations"),  # a bool is not a count
    ({"trainer": "deepspeed"}, "trainer"),               # prefix | trl
    ({"batching": "sorted"}, "batching"),                # random | shuffled_length
    ({"trainer": "trl"}, "anchor_weight=0"),             # the anchor (on by default) is the prefix trainer's
    ({"anchor_weight": -1.0}, "anchor_weight"),
    ({"anchor_every": 0}, "anchor_every"),
    ({"layers": (-1,)}, "layers"),
    ({"layers": "12"}, "layers"),                        # a string is not a list of layer indices
    ({"layers": (12,), "trainer": "trl", "anchor_weight": 0.0}, "trainer='prefix'"),
])
def test_bad_config_values_are_clear_errors(kw, word):
    with pytest.raises(ValueError, match=word.replace("{", r"\{").replace("}", r"\}")):
        ConsolidationConfig(**kw)


def test_config_to_dict_is_json():
    d = ConsolidationConfig().to_dict()
    assert json.loads(json.dumps(d)) == d and d["after"] == "demote"
    assert ConsolidationConfig(layers=[20, 12, 20]).layers == (12, 20)


# ------------------------------------------------------------------------------------------------
# selection and rendering
def test_select_facts_applies_the_thresholds():
    g = _graph()
    _use(g, "Blorps", 4)
    _use(g, "Quindles", 1)
    by_subject = {f["subject"]: f for f in g.facts()}
    assert by_subject["Blorps"]["uses"] >= 4 and by_subject["Snarfs"]["uses"] < by_subject["Quindles"]["uses"]
    picked = select_facts(g, ConsolidationConfig(min_strength=0.0, min_uses=by_subject["Quindles"]["uses"]))
    assert [f["subject"] for f in picked] == ["Blorps", "Quindles"]  # strongest first
    strong = ConsolidationConfig(min_strength=by_subject["Blorps"]["strength"], min_uses=0)
    assert [f["subject"] for f in select_facts(g, strong)] == ["Blorps"]
    assert select_facts(g, ConsolidationConfig(min_strength=0.0, min_uses=0, require_permanent=True)) == []
    assert len(select_facts(g, ConsolidationConfig(min_strength=0.0, min_uses=0, max_facts=2))) == 2


def test_superseded_facts_are_never_selected():
    g = _graph([("Blorps", "live in", "copper caves")])
    g.engram([("Blorps", "live in", "Teal Marsh")], source="S9")  # one home at a time: the caves are superseded
    assert len(g.facts(include_invalid=True)) == 2
    objs = [f["object"] for f in select_facts(g, ConsolidationConfig(min_strength=0.0, min_uses=0))]
    assert objs == ["Teal Marsh"]


def test_render_examples_forms_negatives_and_held_out_question():
    g = _graph()
    facts = select_facts(g, ConsolidationConfig(min_strength=0.0, min_uses=0))[:3]
    others = [f for f in g.facts() if f["id"] not in {x["id"] for x in facts}]
    cfg = ConsolidationConfig(questions_per_fact=2, statements_per_fact=2, negatives_ratio=0.5, open_book_ratio=1.0)
    data = render_examples(facts, cfg, others=others)
    rows = data["rows"]
    kinds = {r["kind"] for r in rows}
    assert kinds == {"question", "statement", "recollection", "negative", "open_book"}
    inputs = {r["input"] for r in rows if not r["memory"]}
    for ev in data["eval"]:  # evaluation asks with a template no training row used
        assert ev["question"] not in inputs and ev["aliases"] == [ev["object"]]
    known = {(f["subject"], f["relation"]) for f in facts}
    for r in rows:
        if r["kind"] == "negative":
            assert r["response"] == P.ABSTAIN_ANSWER and not r["memory"]
        elif r["kind"] == "open_book":
            assert r["memory"] and any(r["response"] in m["text"] for m in r["memory"])
        else:
            assert not r["memory"] and r["response"] != P.ABSTAIN_ANSWER
    assert all((n["subject"], n["relation"]) not in known and n["aliases"] == [] for n in data["negatives_eval"])
    # the non-consolidated fact's question is a negative, never a positive
    other = others[0]
    assert any(r["kind"] == "negative" and other["subject"] in r["input"] for r in rows)
    assert render_examples(facts, cfg, others=others) == data  # seeded


def test_fact_questions_use_world_templates_when_known():
    assert fact_questions("Blorps", "eat")[0] == "What do Blorps eat?"
    generic = fact_questions("Blorps", "eat", ConsolidationConfig(world_templates=False))
    assert generic[0] == "What does Blorps eat?"


def test_generic_too_adds_paraphrases_but_never_the_held_out_question():
    g = _graph()
    facts = [f for f in select_facts(g, ConsolidationConfig(min_strength=0.0, min_uses=0)) if f["relation"] == "eat"]
    plain = ConsolidationConfig(questions_per_fact=8, statements_per_fact=0, negatives_ratio=0.0, open_book_ratio=0.0,
                                generic_too=False)
    more = ConsolidationConfig(questions_per_fact=8, statements_per_fact=0, negatives_ratio=0.0, open_book_ratio=0.0,
                               generic_too=True)
    a, b = render_examples(facts, plain), render_examples(facts, more)
    assert a["eval"] == b["eval"] == [{"question": "Which food do Blorps live on?", "aliases": ["frozen lemons"],
                                       "subject": "Blorps", "relation": "eat", "object": "frozen lemons",
                                       "edge": facts[0]["id"]}]
    qa, qb = {r["input"] for r in a["rows"]}, {r["input"] for r in b["rows"]}
    assert qa == {"What do Blorps eat?", "What is the diet of Blorps?", "What do Blorps feed on?"}
    assert qb == qa | {"What does Blorps eat?", "Blorps eat what?", "Tell me what Blorps eat.",
                       "Do you know what Blorps eat?"}


# ------------------------------------------------------------------------------------------------
# the graph's operations
def test_demote_and_forget_are_logged_and_replay():
    g = _graph()
    facts = {f["subject"]: f for f in g.facts()}
    e_blorps, e_snarfs = facts["Blorps"]["id"], facts["Snarfs"]["id"]
    s0 = g.edge(e_blorps)["strength"]
    g.edges.permanent[e_blorps] = True  # as solidification would have made it
    assert g.demote([e_blorps], 0.25) == 1
    assert g.edge(e_blorps)["strength"] == pytest.approx(s0 * 0.25) and not g.edge(e_blorps)["permanent"]
    assert g.forget([e_snarfs]) == 1
    assert "Snarfs" not in {f["subject"] for f in g.facts()}
    assert g.forget([e_snarfs]) == 0  # already gone
    again = LiquidGraph.replay(g.oplog, g.embedder, g.config, seed=0, base=g.oplog_base)
    assert again.equals(g)
    with pytest.raises(KeyError, match="no edges"):
        g.forget([10_000])
    with pytest.raises(ValueError, match="factor"):
        g.demote([e_blorps], 1.5)
    with pytest.raises(TypeError, match="list of edge ids"):
        g.demote("3")


# ------------------------------------------------------------------------------------------------
# the adapter follows the snapshots (no model needed: the agent loads it only to answer)
def _fake_adapter(path):
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    return path


def test_rollback_restores_the_adapter_of_the_snapshot(tmp_path):
    m = MAGS(MAGSConfig(embedder="hash"))
    a1, a2 = _fake_adapter(tmp_path / "v1"), _fake_adapter(tmp_path / "v2")
    s0 = m.snapshot()
    m.set_consolidated(a1)
    s1 = m.snapshot()
    m.set_consolidated(a2)
    m.rollback(s1)
    assert m.consolidated == a1
    m.rollback(s0)
    assert m.consolidated is None
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        m.set_consolidated(tmp_path / "nothing")
    m.set_consolidated(a2)
    saved = m.save(tmp_path / "save")
    assert MAGS.load(saved).consolidated == a2.resolve()


class _RecordingBackend:
    """An answer backend that records which adapter was active at each generation."""

    def __init__(self):
        self.adapters, self.active_adapter, self.served = {}, None, []

    def load_adapter(self, name, path):
        self.adapters[name] = path

    def set_adapter(self, name):
        self.active_adapter = name

    def generate(self, prompts, **kw):
        from types import SimpleNamespace

        self.served.append(self.active_adapter)
        return [SimpleNamespace(text="frozen lemons") for _ in prompts]


@pytest.mark.parametrize("when, with_memory, closed", [("always", "consolidated-0", "consolidated-0"),
                                                       ("closed_book", None, "consolidated-0")])
def test_consolidated_when_decides_whether_the_adapter_reads_recalled_facts(tmp_path, when, with_memory, closed):
    """``always``: the adapter answers every question; ``closed_book``: only with an empty memory block -- the
    recalled facts (which may hold a newer value than the adapter) are read by the answer model alone."""
    m = MAGS(MAGSConfig(backend="transformers", embedder="hash", consolidated_when=when))
    fake = _RecordingBackend()
    m.backend = lambda role: fake
    m.set_consolidated(_fake_adapter(tmp_path / "v1"))
    fact = {"text": "Blorps eat candied moss", "time": None, "current": None, "speaker": None}
    m._answer("What do blorps eat?", [fact])
    m.ask("What do blorps eat?", recall=False)
    assert fake.served == [with_memory, closed]
    assert fake.active_adapter is None  # restored after each answer
    assert MAGSConfig.from_dict(m.config.to_dict()).consolidated_when == when
    with pytest.raises(ValueError, match="consolidated_when"):
        MAGSConfig(consolidated_when="never")


class _AbstainingBackend(_RecordingBackend):
    """Abstains without the adapter (the recalled facts hold no answer), answers with it."""

    def generate(self, prompts, **kw):
        from types import SimpleNamespace

        from mags_lib import protocol

        self.served.append(self.active_adapter)
        text = "frozen lemons" if self.active_adapter else protocol.ABSTAIN_ANSWER
        return [SimpleNamespace(text=text) for _ in prompts]


@pytest.mark.parametrize("backend, served, answer, by_adapter", [
    (_RecordingBackend, [None], "frozen lemons", False),  # the reader answered from memory: the adapter is not asked
    (_AbstainingBackend, [None, "consolidated-0"], "frozen lemons", True)])  # it abstained: the adapter answers
def test_fallback_asks_the_adapter_only_when_the_reader_abstains_over_recalled_facts(tmp_path, backend, served,
                                                                                        answer, by_adapter):
    m = MAGS(MAGSConfig(backend="transformers", embedder="hash", consolidated_when="fallback"))
    fake = backend()
    m.backend = lambda role: fake
    m.set_consolidated(_fake_adapter(tmp_path / "v1"))
    fact = {"text": "Blorps live in the old mill", "time": None, "current": None, "speaker": None}
    gen, used = m._answer("What do blorps eat?", [fact])
    assert fake.served == served and gen.text == answer and used is by_adapter
    assert fake.active_adapter is None
    fake.served.clear()
    closed = m.ask("What do blorps eat?", recall=False)  # an empty memory block: the adapter straight away
    assert fake.served == ["consolidated-0"] and closed.consolidated


def test_consolidate_skips_when_nothing_qualifies(tmp_path):
    m = MAGS(MAGSConfig(embedder="hash"), graph=_graph())
    res = consolidate(m, ConsolidationConfig(min_strength=1.0, min_uses=50), root=tmp_path)
    assert res.skipped and "min_uses=50" in res.skipped and res.adapter is None and m.consolidated is None
    assert not list(tmp_path.iterdir())


def _trained_adapter(path, weight: bytes = b"w"):
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text('{"r": 4}')
    (path / "adapter_model.safetensors").write_bytes(weight)
    return path


def _gguf_export(folder, source, kind="merged", sha=None):
    from mags_lib.export.layout import _adapter_sha256

    folder.mkdir(parents=True)
    (folder / "model-q8_0.gguf").write_bytes(b"gguf")
    (folder / "lora-f32.gguf").write_bytes(b"gguf")
    (folder / "manifest.json").write_text(json.dumps({
        "source_adapter": {"path": str(source), "sha256": sha or _adapter_sha256(source)},
        "files": {"q8_0": {"file": "model-q8_0.gguf", "kind": kind}, "lora": {"file": "lora-f32.gguf", "kind": "lora"}}}))
    return folder


def test_the_trained_answer_adapter_under_a_consolidation_is_found_or_refused_clearly(tmp_path):
    from mags_lib.consolidation import answer_adapter

    m = MAGS(MAGSConfig(embedder="hash"), graph=_graph())
    assert answer_adapter(m) is None  # the embedded base model
    peft = _trained_adapter(tmp_path / "answer" / "grpo")
    m.model_paths["answer"] = str(peft)  # transformers: the PEFT folder, merged at load
    assert answer_adapter(m) == peft
    gguf = _gguf_export(tmp_path / "answer" / "gguf", peft)
    m.model_paths["answer"] = str(gguf / "model-q8_0.gguf")  # llama.cpp: the merged export
    assert answer_adapter(m) == peft
    m.model_paths["answer"] = str(gguf / "lora-f32.gguf")
    with pytest.raises(ValueError, match="a LoRA file"):
        answer_adapter(m)
    m.model_paths["answer"] = str(tmp_path / "elsewhere.gguf")
    with pytest.raises(ValueError, match="cannot tell"):
        answer_adapter(m)
    stale = _gguf_export(tmp_path / "stale", peft, sha="0" * 64)
    m.model_paths["answer"] = str(stale / "model-q8_0.gguf")
    with pytest.raises(ValueError, match="changed since"):
        answer_adapter(m)
    gone = _gguf_export(tmp_path / "gone", _trained_adapter(tmp_path / "moved"))
    (tmp_path / "moved" / "adapter_config.json").unlink()
    m.model_paths["answer"] = str(gone / "model-q8_0.gguf")
    with pytest.raises(FileNotFoundError, match="holds no PEFT adapter"):
        answer_adapter(m)
    m.model_paths["answer"] = str(peft)
    with pytest.raises(ValueError, match="trainer='prefix'"):
        consolidate(m, ConsolidationConfig(min_strength=0.0, min_uses=0, trainer="trl", anchor_weight=0.0),
                    root=tmp_path / "c")


def test_consolidation_trains_on_the_served_answer_model_and_is_served_only_on_it(tmp_path, monkeypatch):
    import mags_lib.consolidation as C

    peft = _trained_adapter(tmp_path / "answer" / "grpo")
    seen = {}

    def fake_train(tcfg, rows, folder, **kw):  # what the trainer is asked to learn on, not the training itself
        seen.update(kw)
        _fake_adapter(folder)
        return {}

    monkeypatch.setattr(C, "_train_shared_prefix", fake_train)
    m = MAGS(MAGSConfig(embedder="hash"), graph=_graph())
    m.model_paths["answer"] = str(peft)
    res = consolidate(m, ConsolidationConfig(min_strength=0.0, min_uses=0), root=tmp_path / "cons", note=lambda s: None)
    assert seen["merge"] == peft and m.consolidated == res.adapter
    record = json.loads((res.adapter / "consolidation.json").read_text())
    assert record["answer_adapter"]["path"] == str(peft)
    base = MAGS(MAGSConfig(embedder="hash"))  # the base answer model: the adapter was not trained on it
    with pytest.raises(ValueError, match="was trained on the trained answer adapter"):
        base.set_consolidated(res.adapter)
    other = MAGS(MAGSConfig(embedder="hash"))
    other.model_paths["answer"] = str(_trained_adapter(tmp_path / "other", b"other weights"))
    with pytest.raises(ValueError, match="serve the model it was trained on"):
        other.set_consolidated(res.adapter)
    m.set_consolidated(res.adapter)  # the same model: served
    on_base = MAGS(MAGSConfig(embedder="hash"), graph=_graph())
    res_base = consolidate(on_base, ConsolidationConfig(min_strength=0.0, min_uses=0), root=tmp_path / "b",
                           note=lambda s: None)
    assert seen["merge"] is None
    with pytest.raises(ValueError, match="trained on the base answer model"):
        m.set_consolidated(res_base.adapter)


def test_consolidator_schedule(tmp_path, monkeypatch):
    import mags_lib.consolidation as C

    m = MAGS(MAGSConfig(embedder="hash"))
    calls = []
    monkeypatch.setattr(C, "consolidate", lambda m, cfg, root, note: calls.append(m.n_observations) or "r")
    monkeypatch.setattr(m, "observe", lambda text, **kw: setattr(m, "n_observations", m.n_observations + 1))
    c = Consolidator(m, ConsolidationConfig(every_n_observations=3), root=tmp_path)
    for i in range(7):
        c.observe(f"fact {i}")
    assert calls == [3, 6]
    never = Consolidator(m, ConsolidationConfig(every_n_observations=0), root=tmp_path)
    for i in range(4):
        never.observe("x")
    assert calls == [3, 6]


# ------------------------------------------------------------------------------------------------
# a real consolidation (SmolLM2-135M, transformers + PEFT, one torch thread)
@pytest.mark.slow
def test_tiny_consolidation_raises_closed_book_accuracy_and_rollback_restores(tmp_path):
    """3 facts, 8 rows, 16 optimizer steps of a rank-16 LoRA; answers capped at 16 tokens."""
    m = MAGS(MAGSConfig(backend="transformers", embedder="hash", n_threads=1, max_new_tokens_answer=16),
             graph=_graph(FACTS[:3]))
    cfg = ConsolidationConfig(min_strength=0.0, min_uses=0, holdout_template=False, questions_per_fact=2,
                              generic_too=False, statements_per_fact=0, negatives_ratio=0.34, open_book_ratio=0.0, max_steps=16,
                              batch_size=4, learning_rate=3e-3, after="prune")
    facts = select_facts(m.graph, cfg)
    questions = render_examples(facts, cfg)["eval"]
    base = closed_book_accuracy(m, questions)
    n_facts_before = m.graph.stats()["n_facts"]
    res = consolidate(m, cfg, root=tmp_path / "cons", note=lambda s: None)
    assert res.adapter is not None and m.consolidated == res.adapter and res.adapter_bytes > 0
    assert m.graph.stats()["n_facts"] == n_facts_before - len(facts)  # prune: the adapter holds them now
    after = closed_book_accuracy(m, questions)
    assert after["accuracy"] > base["accuracy"], (base["answers"], after["answers"])
    assert after["accuracy"] >= 0.5, after["answers"]
    record = json.loads((res.adapter / "consolidation.json").read_text())
    assert {f["subject"] for f in record["facts"]} == {f["subject"] for f in facts}
    m.rollback(res.previous_snapshot)  # the memory before: facts back, no adapter
    assert m.consolidated is None and m.graph.stats()["n_facts"] == n_facts_before
    assert closed_book_accuracy(m, questions[:2])["answers"] == base["answers"][:2]
    m.rollback(res.snapshot)
    assert m.consolidated == res.adapter
    assert closed_book_accuracy(m, questions[:2])["answers"] == after["answers"][:2]
    m.close()


def test_train_config_mirrors_the_consolidation_config_and_takes_overrides():
    """One TrainConfig for consolidate and for the trainer comparison (bench.consolidation)."""
    from mags_lib.consolidation import train_config

    cfg = ConsolidationConfig(lora_r=8, lora_alpha=16, max_steps=12, batch_size=3, learning_rate=1e-3, threads=1)
    t = train_config(cfg)
    assert (t.role, t.grpo, t.seed) == ("answer", None, cfg.seed)
    assert (t.lora.r, t.lora.alpha, t.lora.target_modules) == (8, 16, tuple(cfg.target_modules))
    assert (t.sft.max_steps, t.sft.batch_size, t.sft.learning_rate, t.sft.max_length) == (12, 3, 1e-3, cfg.max_length)
    assert (t.sft.n_generated, t.sft.save_steps, t.sft.warmup_ratio, t.threads) == (0, 12, 0.0, 1)
    o = train_config(cfg, max_steps=5, batch_size=7, threads=2)
    assert (o.sft.max_steps, o.sft.batch_size, o.sft.save_steps, o.threads) == (5, 7, 5, 2)
    assert o.lora == t.lora and o.sft.learning_rate == t.sft.learning_rate


def test_a_new_lora_on_a_merged_trained_adapter_starts_from_that_model(tiny_base, tmp_path):
    """The consolidation LoRA learns on the served answer model: base + trained adapter merged, then a fresh
    LoRA (identity at start) on top, the trained weights frozen."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from mags_lib.consolidation import train_config
    from mags_lib.training.run import _load_model

    ids = torch.tensor([[1, 5, 9, 14, 3, 27]])
    base = AutoModelForCausalLM.from_pretrained(str(tiny_base), dtype=torch.float32)
    with torch.no_grad():
        plain = base(input_ids=ids).logits
    trained = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"],
                                              init_lora_weights=False, task_type="CAUSAL_LM"))
    trained.save_pretrained(str(tmp_path / "trained"))
    with torch.no_grad():
        want = trained(input_ids=ids).logits
    assert not torch.allclose(want, plain, atol=1e-4)  # the trained adapter changes the model
    tcfg = train_config(ConsolidationConfig())
    model, _ = _load_model(tiny_base, tcfg, "torch", merge=tmp_path / "trained")
    with torch.no_grad():
        got = model(input_ids=ids).logits
    assert torch.allclose(got, want, atol=1e-4)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert not any(any(t in n for t in ("q_proj", "v_proj")) for n in trainable)  # the MLP-only new LoRA
    with pytest.raises(ValueError, match="torch backend"):
        _load_model(tiny_base, tcfg, "unsloth", merge=tmp_path / "trained")


@pytest.mark.parametrize("arg, word", [("[1]", "JSON object"), ("{max_steps: 3}", "JSON object")])
def test_recipe_command_refuses_what_is_not_a_config_object(tmp_path, capsys, arg, word):
    from mags_lib.bench.consolidation import main

    with pytest.raises(SystemExit):
        main(["--recipe", arg, "--out", str(tmp_path)])
    assert word in capsys.readouterr().err
    assert not (tmp_path / "consolidation_recipes.json").exists()  # nothing written


def test_block_ranks_tell_recall_misses_from_reader_misses():
    from mags_lib.bench.consolidation import _block_ranks

    block = ["Pruman plays harmonica", "(2023-01-02, no longer true) Pruman enjoys stargazing", "Pruman enjoys hiking"]
    got = _block_ranks(block, "hiking", "stargazing")
    assert got == {"new_rank": 2, "new_in_block": True, "new_first_in_block": False, "old_unmarked_in_block": False}
    got = _block_ranks(["Pruman enjoys Stargazing", "Pruman enjoys hiking"], "Hiking", "stargazing")
    assert got["new_rank"] == 1 and got["old_unmarked_in_block"]  # the old value shown as if still true
    got = _block_ranks(["Pruman plays harmonica"], "hiking", "stargazing")
    assert got == {"new_rank": None, "new_in_block": False, "new_first_in_block": False, "old_unmarked_in_block": False}


def _fake_setup(tmp_path, monkeypatch, facts=(("Blorps", "eat", "frozen lemons"), ("Quindles", "live in", "Teal Bridge")),
                **config):
    from mags_lib import consolidation as C
    from mags_lib import models

    g = LiquidGraph(HashEmbedder(dim=64), seed=0)
    for i, t in enumerate(facts):
        g.engram([t], source=f"S{i}")
    m = MAGS(MAGSConfig(embedder="hash", **config), graph=g)
    seen: list[list[dict]] = []

    def fake_train(tcfg, rows, folder, **kw):
        seen.append(list(rows))
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")
        return {}

    monkeypatch.setattr(C, "_train_shared_prefix", fake_train)
    monkeypatch.setattr(models, "base_model_dir", lambda *a, **k: tmp_path / "base")
    return g, m, seen


def test_a_consolidation_that_fails_at_its_last_step_changes_nothing(tmp_path, monkeypatch):
    """Writing the version's record failed (a full disk) after the graph was demoted and the new adapter served:
    the memory stayed demoted and a version without its record was served (found by an audit). Now the memory,
    the adapter in use and the versions folder are as before."""
    from pathlib import Path

    from mags_lib import repro

    g, m, _ = _fake_setup(tmp_path, monkeypatch)  # the trainer leaves an adapter folder
    real_write = repro.atomic_write_text

    def full_disk(path, text):
        if Path(path).name == "consolidation.json":
            raise OSError(28, "No space left on device")
        return real_write(path, text)

    monkeypatch.setattr(repro, "atomic_write_text", full_disk)
    cfg = ConsolidationConfig(min_strength=0.0, min_uses=0, after="demote")
    before = g._state()
    with pytest.raises(OSError, match="No space left"):
        consolidate(m, cfg, root=tmp_path / "cons", note=lambda s: None)
    from mags_lib.graph.core import _state_differences

    assert _state_differences(before, g._state()) == [] and m.consolidated is None
    assert list((tmp_path / "cons").iterdir()) == []


@pytest.mark.parametrize("after", ["prune", "demote"])
def test_a_second_consolidation_keeps_what_the_first_took_in(tmp_path, monkeypatch, after):
    """Each version trains one new LoRA: the second trained on its own selection only, so with after="prune" the
    first version's facts left both the graph and the served weights (and with "demote" they became negatives,
    "not known"); found by an audit. The facts of the adapter in use are carried into the next version's rows,
    unless selected again or contradicted by the graph since."""
    from mags_lib import consolidation as C

    g, m, seen = _fake_setup(tmp_path, monkeypatch)
    # demoted facts (0.5 -> 0.25) fall below min_strength: not selected again, still in the graph
    cfg = ConsolidationConfig(min_strength=0.3, min_uses=0, after=after, negatives_ratio=1.0)
    first = consolidate(m, cfg, root=tmp_path / "cons", note=lambda s: None)
    assert {f["subject"] for f in first.facts} == {"Blorps", "Quindles"}
    assert len(g.facts()) == (0 if after == "prune" else 2)
    g.engram([("Snarfs", "fear", "purple umbrellas")], source="S2")
    g.engram([("Quindles", "live in", "Moon Gate")], source="S3")  # the Teal Bridge no longer holds
    second = consolidate(m, cfg, root=tmp_path / "cons", note=lambda s: None)
    record = json.loads((second.adapter / "consolidation.json").read_text())
    assert record["carried"] == 1
    assert {(f["subject"], f["object"]) for f in record["facts"]} == {
        ("Blorps", "frozen lemons"), ("Snarfs", "purple umbrellas"), ("Quindles", "Moon Gate")}
    taught = [r for r in seen[1] if r["kind"] != "negative"]
    assert any(r["response"] == "frozen lemons" for r in taught)  # the first version's fact, still taught
    assert not any("Teal Bridge" in r["response"] for r in seen[1])  # contradicted since: not carried
    asked = set(C.fact_questions("Blorps", "eat", cfg))  # never "not known" again
    assert asked and not any(r["input"] in asked for r in seen[1] if r["kind"] == "negative")


# -- audit (2026-12-07, night): failures, limits, records, schedule ----------------------------------------
def test_an_interrupted_training_leaves_no_version_and_no_snapshot(tmp_path, monkeypatch):
    # training ran outside the all-or-nothing block: a half-written v1 (its log, its checkpoints) and the
    # snapshot taken before stayed, and the next run took v2
    from mags_lib import consolidation as C

    g, m, _ = _fake_setup(tmp_path, monkeypatch)

    def interrupted(tcfg, rows, folder, **kw):
        folder.mkdir(parents=True)
        (folder / "log.csv").write_text("step,loss\n1,2.0\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(C, "_train_shared_prefix", interrupted)
    cfg = ConsolidationConfig(min_strength=0.0, min_uses=0)
    before = g._state()
    with pytest.raises(KeyboardInterrupt):
        consolidate(m, cfg, root=tmp_path / "cons", note=lambda s: None)
    from mags_lib.graph.core import _state_differences

    assert _state_differences(before, g._state()) == [] and g.snapshots == [] and m.consolidated is None
    assert not (tmp_path / "cons").exists() or list((tmp_path / "cons").iterdir()) == []


def test_nothing_to_consolidate_takes_no_snapshot(tmp_path, monkeypatch):
    # a skipped run took a snapshot, which under the limits pushed out the user's own
    from mags_lib.graph import GraphConfig, LimitsConfig

    g, m, _ = _fake_setup(tmp_path, monkeypatch)
    g.config = GraphConfig(limits=LimitsConfig(max_snapshots=1))
    mine = m.snapshot()
    res = consolidate(m, ConsolidationConfig(min_uses=50), root=tmp_path / "cons", note=lambda s: None)
    assert res.skipped and res.previous_snapshot is None and g.snapshots == [mine]


def test_snapshot_limits_of_one_keep_a_failed_consolidation_all_or_nothing(tmp_path, monkeypatch):
    # with max_snapshots=1 the snapshot after the demotion pushed out the one before: the failure path's rollback
    # raised KeyError over the real error, and the demoted graph and an unrecorded version stayed
    from pathlib import Path

    from mags_lib import repro
    from mags_lib.graph import GraphConfig, LimitsConfig
    from mags_lib.graph.core import _state_differences

    g, m, _ = _fake_setup(tmp_path, monkeypatch)
    g.config = GraphConfig(limits=LimitsConfig(max_snapshots=1))
    real_write = repro.atomic_write_text

    def full_disk(path, text):
        if Path(path).name == "consolidation.json":
            raise OSError(28, "No space left on device")
        return real_write(path, text)

    monkeypatch.setattr(repro, "atomic_write_text", full_disk)
    before = g._state()
    with pytest.raises(OSError, match="No space left"):
        consolidate(m, ConsolidationConfig(min_strength=0.0, min_uses=0, after="prune"), root=tmp_path / "cons",
                    note=lambda s: None)
    assert _state_differences(before, g._state()) == [] and m.consolidated is None and g.snapshots == []
    assert list((tmp_path / "cons").iterdir()) == []
    # and when it succeeds, the dropped snapshot before it is said, not returned as one to roll back to
    monkeypatch.setattr(repro, "atomic_write_text", real_write)
    notes: list[str] = []
    res = consolidate(m, ConsolidationConfig(min_strength=0.0, min_uses=0), root=tmp_path / "cons",
                      note=notes.append)
    assert res.previous_snapshot is None and g.snapshots == [res.snapshot]
    assert any("snapshot limits" in n for n in notes)


def test_a_served_adapter_whose_record_is_unreadable_stops_the_next_version(tmp_path, monkeypatch):
    # carried_facts returned [] for a missing or corrupt record: the next version trained without what the served
    # adapter held (with after="prune" gone from the graph too); a JSON list raised AttributeError
    g, m, seen = _fake_setup(tmp_path, monkeypatch)
    cfg = ConsolidationConfig(min_strength=0.0, min_uses=0, after="prune")
    first = consolidate(m, cfg, root=tmp_path / "cons", note=lambda s: None)
    g.engram([("Snarfs", "fear", "purple umbrellas")], source="S9")
    record = first.adapter / "consolidation.json"
    for broken in ('{"facts": [', "[]", '{"facts": [{"subject": 1}]}'):
        record.write_text(broken)
        with pytest.raises(ValueError, match="cannot read the facts"):
            consolidate(m, cfg, root=tmp_path / "cons", note=lambda s: None)
        assert len(seen) == 1 and [f["object"] for f in g.facts()] == ["purple umbrellas"]


def test_a_carried_fact_the_graph_holds_only_as_superseded_is_not_taught_again(tmp_path, monkeypatch):
    # once the newer value left the graph, the carried old value (superseded in the graph) was written back
    g, m, seen = _fake_setup(tmp_path, monkeypatch)
    cfg = ConsolidationConfig(min_strength=0.0, min_uses=0, after="keep")
    consolidate(m, cfg, root=tmp_path / "cons", note=lambda s: None)
    g.engram([("Quindles", "live in", "Moon Gate")], source="S7")
    g.forget([f["id"] for f in g.facts() if f["object"] == "Moon Gate"])
    g.engram([("Snarfs", "fear", "purple umbrellas")], source="S8")
    consolidate(m, ConsolidationConfig(min_strength=0.0, min_uses=0, after="keep"), root=tmp_path / "cons",
                note=lambda s: None)
    assert any(r["response"] == "frozen lemons" for r in seen[1])
    assert not any("Teal Bridge" in r["response"] for r in seen[1])


def test_memory_none_is_refused_before_training(tmp_path, monkeypatch):
    g, m, seen = _fake_setup(tmp_path, monkeypatch, memory="none")
    with pytest.raises(ValueError, match="memory='none'"):
        consolidate(m, ConsolidationConfig(min_strength=0.0, min_uses=0), root=tmp_path / "cons", note=lambda s: None)
    assert seen == [] and g.snapshots == []


def test_a_failed_scheduled_consolidation_keeps_the_observation_and_tries_again_later(tmp_path, monkeypatch):
    from mags_lib import consolidation as C

    _, m, _ = _fake_setup(tmp_path, monkeypatch)
    calls: list[int] = []

    def oom(m_, cfg, root, note):
        calls.append(m_.n_observations)
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(C, "consolidate", oom)
    monkeypatch.setattr(m, "observe", lambda text, **kw: setattr(m, "n_observations", m.n_observations + 1) or text)
    c = Consolidator(m, ConsolidationConfig(every_n_observations=2), root=tmp_path / "cons", note=lambda s: None)
    got = [c.observe(f"turn {i}") for i in range(6)]
    assert got == [f"turn {i}" for i in range(6)]  # every observation returned
    assert calls == [2, 4, 6] and len(c.errors) == 3 and "CUDA out of memory" in c.errors[0]


def test_snapshot_ids_go_on_after_a_save_and_load(tmp_path, monkeypatch):
    # ids restarted at s0 after a load: a consolidation record's snapshot id named a later session's snapshot
    g, m, _ = _fake_setup(tmp_path, monkeypatch)
    first = [m.snapshot(), m.snapshot()]
    m.save(tmp_path / "mem")
    m2 = MAGS.load(tmp_path / "mem", embedder=g.embedder)
    sid = m2.snapshot()
    assert sid not in first
    with pytest.raises(KeyError, match="was dropped"):
        m2.rollback(first[0])


def test_rolling_back_to_a_graph_snapshot_keeps_the_adapter_in_use(tmp_path, monkeypatch):
    g, m, _ = _fake_setup(tmp_path, monkeypatch)
    res = consolidate(m, ConsolidationConfig(min_strength=0.0, min_uses=0), root=tmp_path / "cons", note=lambda s: None)
    sid = g.snapshot()  # the graph's own: it names no adapter
    m.rollback(sid)
    assert m.consolidated == res.adapter


@pytest.mark.parametrize("kw, word", [
    ({"open_book_ratio": 2.0}, "open_book_ratio"),  # one open-book row per fact at most: 2 was silently 1
    ({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"), ({"seed": None}, "seed"),
    ({"question_templates": ("Tell me about {S}.",)}, "{R}"),  # every fact of the subject would answer it
])
def test_more_config_values_are_clear_errors(kw, word):
    with pytest.raises(ValueError, match=word.replace("{", r"\{").replace("}", r"\}")):
        ConsolidationConfig(**kw)


def test_rendered_rows_have_unique_ids():
    facts = [{"id": f"e{i}", "subject": s, "relation": r, "object": o} for i, (s, r, o) in enumerate(
        [("Blorps", "eat", "frozen lemons"), ("Blorps", "live in", "Teal Bridge"), ("Snarfs", "fear", "rain")])]
    rows = render_examples(facts, ConsolidationConfig(negatives_ratio=1.0), others=[
        {"id": "x", "subject": "Zarnok", "relation": "guards", "object": "the Moon Gate"}])["rows"]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))
