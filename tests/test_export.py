"""Export of a real model: SmolLM2-135M with a stand-in LoRA (random non-zero A and B, seeded) to every
GGUF variant, loaded back with llama.cpp and compared with transformers.

The export runs once for the module (about 1.5 minutes on a quiet 2-core machine, several under load);
every test here is marked slow. The fast checks of the same code are in test_export_units.py.
"""

from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from mags_lib import export as E
from mags_lib import protocol as P
from mags_lib.backends import load_backend
from mags_lib.backends.llamacpp_backend import read_gguf_header
from mags_lib.export import layout

pytestmark = pytest.mark.slow

WRITE = ["Blorps eat only frozen lemons.", "My brother Tomas moved to Lisbon in 2019.",
         "Quindles live under the Teal Bridge.", "The meeting ended at 5 pm.", "Zarn leads the blorps."]
ASK = ["What do blorps eat?", "Where do quindles live?", "Who leads the blorps?"]
PROMPTS = [P.build_messages("write", t) for t in WRITE] + [P.build_messages("ask", t) for t in ASK]
N_NEW = 24


@pytest.fixture(scope="module")
def work(build_once):
    def build(d):
        adapter = E.random_lora(d / "adapter", r=8, b_std=0.02, seed=1)
        E.export_adapter(adapter, d / "gguf", E.ExportConfig(), progress=False)
        return {"adapter": str(adapter)}

    d, built = build_once("export", build)  # once per session, not once per worker that gets a test here
    adapter = type(d)(built["adapter"])
    manifest = E.read_manifest(d / "gguf")
    return SimpleNamespace(dir=d, adapter=adapter, gguf=d / "gguf", manifest=manifest,
                           file=lambda v: d / "gguf" / E.FILES[v])


@pytest.fixture(scope="module")
def ref(work):
    """The transformers model the files came from (adapter merged in float32), and its greedy outputs
    on PROMPTS as token ids, with the prompt ids."""
    b = load_backend("transformers", model=work.adapter, n_threads=1, batch_size=4)
    texts = [b.render(m) for m in PROMPTS]
    outs = b.generate(texts, max_new_tokens=N_NEW)
    b.seqs = [(b.tokenize(t), b.tokenize(o.text)) for t, o in zip(texts, outs)]
    b.texts = texts
    yield b
    b.close()


def _link_gguf_tree(src, dst):
    """A copy of an export folder whose .gguf files are hard links (the suite's disk footprint: three roles'
    copies of every variant took 1.8 GB); the JSON files are real copies, so a test that edits one edits
    its own."""
    def link_or_copy(s, d):
        if str(s).endswith(".gguf"):
            os.link(s, d)
        else:
            shutil.copy2(s, d)
    shutil.copytree(src, dst, copy_function=link_or_copy)


def _agreement(backend, seqs, ref_top):
    hits = total = 0
    for (p, o), rt in zip(seqs, ref_top):
        t = backend.top1(p + o)[len(p) - 1:len(p) + len(o) - 1]
        hits += sum(int(a == b) for a, b in zip(t, rt))
        total += len(rt)
    return hits / total


@pytest.fixture(scope="module")
def ref_top(ref):
    return [ref.top1(p + o)[len(p) - 1:len(p) + len(o) - 1] for p, o in ref.seqs]


def test_every_variant_is_written_with_its_manifest(work):
    m = E.read_manifest(work.gguf, verify="sha256")
    assert set(m["files"]) == set(E.VARIANTS) and m["skipped"] == {}
    assert m["source_adapter"]["sha256"] == layout._adapter_sha256(work.adapter)
    types = {v: read_gguf_header(work.file(v)).metadata.get("general.file_type") for v in E.VARIANTS}
    assert types == {"f16": 1, "q8_0": 7, "q4_k_m": 15, "q4_1": 3, "lora": None}
    sizes = {v: work.file(v).stat().st_size for v in E.VARIANTS}
    assert sizes["lora"] < sizes["q4_1"] < sizes["q4_k_m"] < sizes["q8_0"] < sizes["f16"]
    model = read_gguf_header(work.file("f16"))
    assert len(model.tensors) == 1 + 30 * 9 + 1  # embeddings (tied: no output.weight), 30 blocks, final norm
    lora = read_gguf_header(work.file("lora"))
    assert lora.type == "adapter" and lora.metadata["adapter.type"] == "lora"
    assert lora.metadata["adapter.lora.alpha"] == 0.0  # the scaling is folded into B
    assert len(lora.tensors) == 30 * 7 * 2  # A and B of the 7 projections of 30 blocks
    assert (work.gguf / "meta.json").is_file()
    mtime = (work.gguf / "manifest.json").stat().st_mtime_ns
    assert E.export_adapter(work.adapter, work.gguf, progress=False) == m  # same adapter: nothing redone
    assert (work.gguf / "manifest.json").stat().st_mtime_ns == mtime


def test_tokenizer_and_hyperparameters_match_the_embedded_gguf(work):
    """The embedded SmolLM2 GGUF was written by llama.cpp's own converter: the exported file must say
    the same about the architecture and the tokenizer, token by token."""
    import llama_cpp

    from mags_lib.models import smollm2_gguf_path

    keys = ["general.architecture", "llama.block_count", "llama.context_length", "llama.embedding_length",
            "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
            "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "llama.rope.dimension_count",
            "llama.vocab_size", "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
            "tokenizer.ggml.add_bos_token", "tokenizer.chat_template"]
    a = llama_cpp.Llama(str(smollm2_gguf_path()), vocab_only=True, verbose=False)
    b = llama_cpp.Llama(str(work.file("f16")), vocab_only=True, verbose=False)
    try:
        assert {k: b.metadata.get(k) for k in keys} == {k: a.metadata.get(k) for k in keys}
        n = a.n_vocab()
        assert b.n_vocab() == n == 49152
        assert [b._model.token_get_text(i) for i in range(n)] == [a._model.token_get_text(i) for i in range(n)]
        assert [b._model.token_get_attr(i) for i in range(n)] == [a._model.token_get_attr(i) for i in range(n)]
        text = P.SYSTEM_PROMPTS["write"] + " 2023-05-08 naïve <|im_end|> x"
        assert b.tokenize(text.encode(), add_bos=False, special=True) == a.tokenize(text.encode(), add_bos=False,
                                                                                     special=True)
    finally:
        a.close()
        b.close()


def test_f16_greedy_tokens_equal_transformers_where_the_reference_is_not_tied(work, ref):
    """Greedy decoding of the F16 file gives transformers' tokens, on every prompt whose reference
    continuation (its end-of-turn included) never has two candidates within 0.05 logits of each other
    (F16 rounding of the weights moves logits by ~1e-3; a near-tie may rightly go either way)."""
    import torch

    clear = []
    for (p, o), text in zip(ref.seqs, ref.texts):
        stopped = len(o) < N_NEW  # then the decision to stop (end-of-turn) is checked too
        with torch.inference_mode():
            logits = ref.model(torch.tensor([p + o])).logits[0, len(p) - 1:len(p) + len(o) - 1 + stopped]
        top2 = torch.topk(logits, 2).values
        if float((top2[:, 0] - top2[:, 1]).min()) >= 0.05:
            clear.append((text, o))
    assert len(clear) >= 3, "too few prompts without near-ties to test greedy equality"
    with load_backend("llamacpp", model=work.file("f16"), n_threads=1, n_ctx=1024, prefix_cache=False) as b:
        for text, o in clear:
            got = b.tokenize(b.generate([text], max_new_tokens=N_NEW)[0].text)
            assert got == o


@pytest.fixture(scope="module")
def base_f16(tmp_path_factory):
    """The untouched base as an F16 GGUF, to apply the LoRA file onto without Q4_1's noise."""
    import torch
    from transformers import AutoModelForCausalLM

    from mags_lib.models import base_model_dir

    base = base_model_dir()
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    return E.write_model_gguf(model, tmp_path_factory.mktemp("base-f16") / "base-f16.gguf", "F16", tokenizer_dir=base, base_dir=base,
                              progress=False)


@pytest.mark.parametrize("variant, floor", [("f16", 0.99), ("q8_0", 0.9), ("q4_k_m", 0.75), ("q4_1", 0.75),
                                            ("lora", 0.9), ("lora@f16", 0.99)])
def test_teacher_forced_top1_agreement(work, ref, ref_top, base_f16, variant, floor):
    """Floors for this random stand-in adapter, below what was measured on it (F16 1.0, Q8_0 0.95, LoRA on
    the Q4_1 base 0.98: its logits are flatter than a trained model's, so quantization flips more
    near-ties); the LoRA file applied onto an F16 base is the PEFT adapter itself, up to rounding."""
    kw = {"model": work.file("lora"), "base_model": base_f16} if variant == "lora@f16" else {"model": work.file(variant)}
    with load_backend("llamacpp", n_threads=1, n_ctx=1024, share_model=False, **kw) as b:
        assert _agreement(b, ref.seqs, ref_top) >= floor


def test_the_adapter_changes_the_model(work, ref, ref_top):
    """The stand-in is not a no-op: the base model disagrees with it (so the agreements above measure
    the export, not the base)."""
    with load_backend("llamacpp", n_threads=1, n_ctx=1024, share_model=False) as b:
        assert _agreement(b, ref.seqs, ref_top) < 0.9


def test_interrupted_export_keeps_the_previous_one(work, tmp_path, monkeypatch):
    import gguf

    out = tmp_path / "gguf"
    before = E.export_adapter(work.adapter, out, E.ExportConfig(variants=("lora",)), progress=False)
    real = gguf.GGUFWriter.write_tensors_to_file

    def half_then_interrupt(self, *a, **k):
        self.write_ti_data_to_file()
        self.fout[0].write(b"\0" * 4096)
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        E.export_adapter(work.adapter, out, E.ExportConfig(variants=("lora",), force=True), progress=False)
    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", real)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gguf"]  # no partial folder or file left
    assert E.read_manifest(out, verify="sha256") == before  # the previous export, intact


def test_a_damaged_export_is_made_again_and_a_foreign_folder_is_refused(work, tmp_path):
    """An audit found --force stuck on a damaged export (it read the old manifest first and raised "export
    again (--force)"), and an export that replaced whatever folder --out named, the adapter itself included."""
    out = tmp_path / "gguf"
    E.export_adapter(work.adapter, out, E.ExportConfig(variants=("lora",)), progress=False)
    lora = out / E.FILES["lora"]
    lora.write_bytes(lora.read_bytes()[:1000])  # truncated
    m = E.export_adapter(work.adapter, out, E.ExportConfig(variants=("lora",), force=True), progress=False)
    assert E.read_manifest(out, verify="sha256") == m
    (out / "manifest.json").write_text("{broken")  # a damaged manifest: no force needed to make it again
    assert E.export_adapter(work.adapter, out, E.ExportConfig(variants=("lora",)), progress=False)["files"]
    run = tmp_path / "run"
    shutil.copytree(work.adapter, run / "sft")
    (run / "notes.txt").write_text("mine")
    for target, words in ((run, "holds the adapter being exported"), (tmp_path / "other", "is not an export folder")):
        target.mkdir(exist_ok=True)
        (target / "notes.txt").write_text("mine")
        with pytest.raises(E.ExportError, match=words):
            E.export_adapter(run / "sft", target, E.ExportConfig(variants=("lora",)), progress=False)
        assert (target / "notes.txt").read_text() == "mine"
    assert (run / "sft" / "adapter_config.json").is_file()


def test_llamacpp_switches_the_exported_adapter_like_peft(work, ref, tmp_path):
    """The exported LoRA switched in and out of one llama.cpp context, and the PEFT adapter switched in
    and out of one transformers model: each restores its base output exactly."""
    msgs = PROMPTS[0]
    with load_backend("llamacpp", n_threads=1, n_ctx=1024) as b:
        base = b.generate([msgs], max_new_tokens=N_NEW)[0].text
        b.load_adapter("trained", work.file("lora"))
        b.set_adapter("trained")
        tuned = b.generate([msgs], max_new_tokens=N_NEW)[0].text
        b.set_adapter(None)
        assert b.generate([msgs], max_new_tokens=N_NEW)[0].text == base != tuned
    with load_backend("transformers", n_threads=1) as t:
        t_base = t.generate([msgs], max_new_tokens=N_NEW)[0].text
        t.load_adapter("trained", work.adapter)
        t.set_adapter("trained")
        t_tuned = t.generate([msgs], max_new_tokens=N_NEW)[0].text
        assert t_tuned == ref.generate([msgs], max_new_tokens=N_NEW)[0].text  # = the merged model
        t.set_adapter(None)
        assert t.generate([msgs], max_new_tokens=N_NEW)[0].text == t_base != t_tuned
        t.unload_adapter("trained")
        assert t.generate([msgs], max_new_tokens=N_NEW)[0].text == t_base


def _trained_run(root, role, tag, adapter):
    from mags_lib.roles import ROLE_SPECS

    run = root / role / tag
    shutil.copytree(adapter, run / "sft")
    (run / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "role": role, "final_stage": "sft",
                                               "prompt": ROLE_SPECS[role].trained.to_dict()}))
    return run


def test_trained_layout_exports_and_resolves(work, tmp_path):
    run = _trained_run(tmp_path, "ask", "t1", work.adapter)
    m = E.export_role("ask", "t1", E.ExportConfig(variants=("lora",)), models_root=tmp_path, progress=False)
    assert m["role"] == "ask" and m["run_tag"] == "t1" and m["stage"] == "sft"
    path = E.trained_gguf("ask", "t1", "lora", models_root=tmp_path)
    assert path == run / "gguf" / "lora-f32.gguf"
    with load_backend("llamacpp", model=path, n_threads=1, n_ctx=1024) as a, \
            load_backend("llamacpp", model=work.file("lora"), n_threads=1, n_ctx=1024) as b:
        assert a.generate([PROMPTS[1]], max_new_tokens=8)[0].text == b.generate([PROMPTS[1]], max_new_tokens=8)[0].text


def test_mags_trained_models_run_on_the_exports_with_their_trained_prompts(work, tmp_path):
    """MAGS.default(models="trained") on llama.cpp: every role's file is its export's default (Q8_0),
    prompted with the trained prompt its run recorded; a stale export is refused."""
    from mags_lib import MAGS
    from mags_lib.roles import ROLE_SPECS

    runs = {r: _trained_run(tmp_path, r, "t2", work.adapter) for r in ("ask", "write", "answer")}
    for run in runs.values():
        _link_gguf_tree(work.gguf, run / "gguf")  # the same adapter: the export of the module fixture
    with MAGS.default(models="trained", trained_tag="t2", models_root=tmp_path, embedder="hash", n_threads=1,
                      n_ctx=1024) as m:
        assert {r: m.model_paths[r] for r in runs} == {r: str(run / "gguf" / E.FILES["q8_0"])
                                                        for r, run in runs.items()}
        assert m.prompt_spec("write") == ROLE_SPECS["write"].trained
        o = m.observe("Blorps eat only frozen lemons.", source="D1:1")
        a = m.ask("What do blorps eat?")
        assert o.extraction.text is not None and isinstance(a.answer, str)
    (runs["ask"] / "sft" / "adapter_model.safetensors").write_bytes(b"retrained")
    with pytest.raises(E.ExportError, match="another version"):
        MAGS.default(models="trained", trained_tag="t2", models_root=tmp_path, embedder="hash", n_threads=1)


def test_parity_table_and_manifest_record(work, tmp_path):
    from mags_lib.export.parity import ParityConfig, parity, parity_summary

    rows = [{"id": i, "input": t, "response": f"<memory_write>{t.split()[0]},is,mentioned</memory_write>"}
            for i, t in enumerate(WRITE[:2])]
    df = parity("write", rows, work.adapter, {"f16": work.file("f16")},
                ParityConfig(n_prompts=2, max_new_tokens=12, embedder="hash"), out_dir=tmp_path, progress=False)
    assert list(df["label"]) == ["transformers", "f16"]
    r = df.set_index("label")
    assert r.loc["transformers", "top1_agreement"] == 1.0 and r.loc["f16", "top1_agreement"] >= 0.98
    assert 0 <= r.loc["f16", "greedy_equal"] <= 1 and r.loc["f16", "n_positions"] > 2 * 5
    for col in ("adherence", "op_f1", "exact_f1", "tokens_per_s", "size_mb"):
        assert col in df.columns
    lines = (tmp_path / "parity_write.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 2 and "f16" in json.loads(lines[1])
    copy = tmp_path / "gguf"
    _link_gguf_tree(work.gguf, copy)
    E.record_parity(copy, parity_summary(df))
    assert E.read_manifest(copy)["parity"]["f16"]["top1_agreement"] >= 0.98


def test_top1_only_files_skip_generation_and_rescore_matches(work, tmp_path):
    """A file named in top1_only is measured on transformers' token ids alone (its agreement is the same as
    with generation), gets no greedy or quality figures, and bench.unsloth_gguf.rescore scores the written
    outputs as parity did."""
    from mags_lib.bench.unsloth_gguf import rescore
    from mags_lib.export.parity import ParityConfig, parity

    rows = [{"id": i, "input": t, "response": f"<memory_write>{t.split()[0]},is,mentioned</memory_write>"}
            for i, t in enumerate(WRITE[:2])]
    cfg = ParityConfig(n_prompts=2, max_new_tokens=12, embedder="hash")
    files = {"full": work.file("q8_0"), "ids": work.file("q8_0")}
    df = parity("write", rows, work.adapter, files, cfg, out_dir=tmp_path, top1_only=["ids"], progress=False)
    r = df.set_index("label")
    assert r.loc["ids", "top1_agreement"] == r.loc["full", "top1_agreement"] >= 0.9
    assert np.isnan(r.loc["ids", "greedy_equal"]) and np.isnan(r.loc["ids", "op_f1"])
    assert not np.isnan(r.loc["full", "greedy_equal"]) and not np.isnan(r.loc["full", "op_f1"])
    again = rescore(tmp_path / "parity_write.jsonl", embedder="hash")
    assert set(again) == {"transformers", "full"}
    for label in again:
        for k, v in again[label].items():
            assert v == pytest.approx(r.loc[label, k])
    with pytest.raises(ValueError, match="not in files"):
        parity("write", rows, work.adapter, files, cfg, top1_only=["nope"], progress=False)


def test_answer_parity_is_scored_by_the_game_rule(work, tmp_path):
    """The reader's rows carry recalled memory and aliases; its files are scored by accuracy (the game's rule),
    prompted with the role's trained prompt and cut at its stop string (a newline)."""
    from mags_lib.export.parity import ParityConfig, parity
    from mags_lib.protocol import ABSTAIN_ANSWER

    mem = [{"text": "blorps eat frozen lemons", "time": None, "current": None, "speaker": None}]
    rows = [{"id": 0, "input": "What do blorps eat?", "response": "frozen lemons", "memory": mem,
             "aliases": ["frozen lemons", "lemons"]},
            {"id": 1, "input": "Where do quindles live?", "response": ABSTAIN_ANSWER, "memory": mem, "aliases": []}]
    df = parity("answer", rows, work.adapter, {"q8_0": work.file("q8_0")},
                ParityConfig(n_prompts=2, max_new_tokens=200), out_dir=tmp_path, progress=False)
    r = df.set_index("label")
    for col in ("accuracy", "abstain_acc", "false_abstain"):
        assert 0.0 <= r.loc["q8_0", col] <= 1.0 and col in r.columns
    assert "op_f1" not in df.columns and r.loc["q8_0", "top1_agreement"] >= 0.9
    head, *examples = [json.loads(x) for x in (tmp_path / "parity_answer.jsonl").read_text().splitlines()]
    assert head["prompt"]["name"] == "trained" and head["max_new_tokens"] == 48  # the spec's budget caps 200
    assert all("\n" not in e["q8_0"] and "\n" not in e["transformers"] for e in examples)


def test_switch_timing_and_memory_report(work):
    from mags_lib.export.switch import memory_footprint, time_switch

    df = time_switch(None, {"a": work.file("lora")}, merged={"q8_0": work.file("q8_0")}, repeats=2)
    assert {"load a whole model (q8_0)", "load an adapter", "switch adapter (one context)"} <= set(df["what"])
    assert (df["p50_s"] >= 0).all()
    merged = memory_footprint("merged_models", [work.file(v) for v in ("f16", "q8_0", "q4_k_m")], n_ctx=512)
    shared = memory_footprint("adapters_per_context", [work.file("lora")] * 3, n_ctx=512)
    assert merged["n_models"] == shared["n_models"] == 3
    assert shared["uss_mb"] < merged["uss_mb"]  # one base in memory, not three models


def test_mags_runs_on_the_exported_files(work):
    """The agent on exported files: a merged Q8_0 writer, and an asker that is the LoRA file applied
    onto the embedded base, whose weights it shares with the (base) reader -- each role its own context
    and adapter."""
    from mags_lib import MAGS

    with MAGS.default(write_model=str(work.file("q8_0")), ask_model=str(work.file("lora")), embedder="hash",
                      n_threads=1, n_ctx=1024) as m:
        o = m.observe("Blorps eat only frozen lemons.", source="D1:1")
        a = m.ask("What do blorps eat?")
        assert m.backend("write").model_path == str(work.file("q8_0"))
        ask, answer = m.backend("ask"), m.backend("answer")
        assert ask.lora_path == str(work.file("lora")) and ask.active_adapter == "default"
        assert answer.active_adapter is None and ask.model_handle == answer.model_handle
        assert o.extraction.text is not None and isinstance(a.answer, str)


def test_parity_of_roles_in_processes_equals_one_process(work, tmp_path):
    """export.report.parity_all on two roles (the same stand-in files, smoke test rows): two processes give the
    rows of one process but for the timings, and record each role's summary in its own manifest."""
    import pandas as pd

    from mags_lib.data import GenerationConfig, build_all
    from mags_lib.export.parity import ParityConfig
    from mags_lib.export.report import Source, parity_all

    cfg = GenerationConfig(n_train=4, n_validation=2, n_test=3, worlds_train=2, worlds_validation=1, worlds_test=1)
    build_all("smoke", seed_path=tmp_path / "no-seed", config=cfg, root=tmp_path, progress=False)
    pcfg = ParityConfig(n_prompts=2, max_new_tokens=8, embedder="hash")
    tables = {}
    for n_jobs in (1, 2):
        srcs = {}
        for role in ("ask", "write"):
            copy = tmp_path / f"gguf-{role}-{n_jobs}"
            _link_gguf_tree(work.gguf, copy)
            srcs[role] = Source(role, work.adapter, copy, True)
        tables[n_jobs] = parity_all(srcs, ["q8_0"], pcfg, profile="smoke", out_dir=tmp_path / f"out{n_jobs}",
                                    n_jobs=n_jobs, data_root=tmp_path, progress=False)
        for role in srcs:
            assert E.read_manifest(srcs[role].gguf_dir)["parity"]["q8_0"]["n_prompts"] == 2
    assert list(tables[2]["role"]) == ["ask", "ask", "write", "write"]  # the caller's order
    other = ["tokens_per_s", "load_s", "file"]  # timings, and each run's own copy of the files
    pd.testing.assert_frame_equal(tables[2].drop(columns=other), tables[1].drop(columns=other))
    with pytest.raises(ValueError, match="n_jobs"):
        parity_all(srcs, ["q8_0"], pcfg, profile="smoke", n_jobs=0)
