"""Importance matrices for the 4-bit GGUF files: what the hooks measure, what llama.cpp's quantizer does
with them, bad matrices refused, and the export recording and reusing its calibration.

Tiny random llamas with the real tokenizer (seconds each); the real-model export is in test_export.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mags_lib import export as E
from mags_lib.export.imatrix import ImportanceMatrix, calibration_texts, importance_matrix

TEXTS = ["Blorps eat only frozen lemons.", "Where do quindles live? Under the Teal Bridge, since 2019.",
         "Zarn leads.", "My brother Tomas moved to Lisbon in 2019 and works as a baker there, near the river."]


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A 2-layer llama whose rows (256, 512) fit llama.cpp's 256-wide K-quant blocks, and its F16 GGUF."""
    import torch
    from fakes import make_tiny_llama
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = tmp_path_factory.mktemp("wide")
    folder = make_tiny_llama(d / "model", hidden_size=256, intermediate_size=512)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    f16 = E.write_model_gguf(model, d / "f16.gguf", "F16", tokenizer_dir=folder, progress=False)
    return model, AutoTokenizer.from_pretrained(str(folder)), folder, f16


# Both read the file through the project's header reader: gguf.GGUFReader parses every metadata field in Python
# first (the tokenizer's 49,152 tokens and merges, ~5 s a file, most of this module's time).
def _tensors(path):
    import gguf
    from gguf.quants import dequantize

    from mags_lib.backends.llamacpp_backend import read_gguf_header

    header, raw = read_gguf_header(path), np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, shape, ggml_type, offset in header.tensors:
        if name.startswith("blk."):  # the embeddings: slow, never weighed
            qt = gguf.GGMLQuantizationType(ggml_type)
            block, size = gguf.GGML_QUANT_SIZES[qt]
            at = header.data_offset + offset
            data = np.array(raw[at:at + int(np.prod(shape)) // block * size])
            out[name] = (qt, dequantize(data, qt).reshape(-1, int(shape[0])))
    return out


def _fields(path):
    from mags_lib.backends.llamacpp_backend import read_gguf_header

    return {k: v for k, v in read_gguf_header(path).metadata.items() if k.startswith("quantize.")}


def test_importance_is_the_mean_squared_input_of_each_projection(wide):
    """blk.L.attn_q/k/v weigh the normed hidden state entering block L: computed here from the model's own
    hidden states, over the tokens of every text and no padding (texts of four lengths in one batch)."""
    import torch

    model, tok, _, f16 = wide
    im = importance_matrix(model, tok, TEXTS, batch_size=4, progress=False)
    two_d = {n for n, (_, a) in _tensors(f16).items() if n.startswith("blk.") and a.shape[0] > 1}
    assert set(im.values) == two_d and len(two_d) == 2 * 7  # q k v o gate up down in both blocks
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    assert im.n_tokens == sum(map(len, ids)) and len(set(map(len, ids))) == 4
    for layer in (0, 1):
        xs = []
        with torch.no_grad():
            for i in ids:
                hs = model(input_ids=torch.tensor([i]), output_hidden_states=True).hidden_states[layer]
                xs.append(model.model.layers[layer].input_layernorm(hs)[0])
        want = (torch.cat(xs) ** 2).mean(0).numpy()
        for t in ("attn_q", "attn_k", "attn_v"):
            np.testing.assert_allclose(im.values[f"blk.{layer}.{t}.weight"], want, rtol=1e-4, atol=1e-7)
    assert im.values["blk.0.ffn_down.weight"].shape == (512,) and im.values["blk.0.ffn_up.weight"].shape == (256,)
    one = importance_matrix(model, tok, TEXTS, batch_size=1, progress=False)  # no padding at all
    for name, v in im.values.items():
        np.testing.assert_allclose(v, one.values[name], rtol=1e-4, atol=1e-8)


def _weighted_errors(src, quantized, weights):
    out = {}
    for name, (qt, a) in _tensors(quantized).items():
        if name in weights:
            w = np.asarray(weights[name], dtype=np.float64)
            out[name] = (qt.name, float((((a - src[name][1]) ** 2) * w).sum()))
    return out


@pytest.mark.parametrize("qtype", ["Q4_K_M", "Q4_1"])
def test_quantizer_weighs_the_rounding_by_the_matrix(wide, tmp_path, qtype):
    """Columns with large importance are rounded closer: the importance-weighted error of every weighed
    tensor falls against llama.cpp's unweighted file, with the same type per tensor and the
    quantize.imatrix.* keys written; a file made without a matrix has none."""
    _, _, _, f16 = wide
    rng = np.random.default_rng(0)
    src = _tensors(f16)
    weights = {n: rng.lognormal(0.0, 1.5, a.shape[1]).astype(np.float32)
               for n, (_, a) in src.items() if n.startswith("blk.") and a.shape[0] > 1}
    im = ImportanceMatrix(values=weights, n_texts=7, n_tokens=99, dataset="a test matrix")
    plain = E.quantize_gguf(f16, tmp_path / "plain.gguf", qtype)
    weighed = E.quantize_gguf(f16, tmp_path / "weighed.gguf", qtype, imatrix=im)
    p, w = _weighted_errors(src, plain, weights), _weighted_errors(src, weighed, weights)
    assert set(p) == set(weights) and {n: t for n, (t, _) in p.items()} == {n: t for n, (t, _) in w.items()}
    if qtype == "Q4_K_M":
        assert {t for t, _ in p.values()} >= {"Q4_K", "Q6_K"}  # real K-quants, not only fallbacks
    ratios = {n: w[n][1] / p[n][1] for n in weights}
    assert max(ratios.values()) < 0.97 and np.mean(list(ratios.values())) < 0.85, ratios
    assert _fields(weighed) == {"quantize.imatrix.dataset": "a test matrix", "quantize.imatrix.entries_count": 14,
                                "quantize.imatrix.chunks_count": 7}
    assert _fields(plain) == {}
    from mags_lib.backends import load_backend

    with load_backend("llamacpp", model=weighed, n_threads=1, n_ctx=256, share_model=False) as b:
        assert b.generate(["Blorps eat"], max_new_tokens=2)[0].n_new_tokens >= 1  # llama.cpp serves it


@pytest.mark.parametrize("change, fragment", [
    (lambda v: {**v, "blk.9.attn_q.weight": v["blk.0.attn_q.weight"]}, "names no 2-D tensor"),  # unknown tensor
    (lambda v: {**v, "blk.0.attn_q.weight": v["blk.0.attn_q.weight"][:100]}, "has 100 values"),  # other model
    (lambda v: {**v, "blk.0.ffn_up.weight": np.full(256, np.nan, np.float32)}, "non-finite"),  # broken sums
    (lambda v: {**v, "blk.1.ffn_down.weight": -np.ones(512, np.float32)}, "negative"),  # not a square
    (lambda v: {}, "empty"),
])
def test_a_bad_matrix_is_refused_before_anything_is_written(wide, tmp_path, change, fragment):
    model, tok, _, f16 = wide
    good = importance_matrix(model, tok, TEXTS[:1], progress=False).values
    with pytest.raises(ValueError, match=fragment):
        E.quantize_gguf(f16, tmp_path / "q.gguf", "Q4_K_M", imatrix=change(good))
    assert list(tmp_path.iterdir()) == []


def test_calibration_texts_are_the_prompt_the_model_sees_then_the_gold(wide):
    _, tok, _, _ = wide
    from mags_lib.roles import ROLE_SPECS

    rows = [{"input": "Blorps eat frozen lemons.", "response": "<memory_write>Blorps,eat,frozen lemons</memory_write>"},
            {"input": "Nothing to see here.", "response": ""}]
    spec = ROLE_SPECS["write"].trained
    texts = calibration_texts("write", rows, tok, spec=spec)
    prompt = tok.apply_chat_template(spec.messages(rows[0]["input"]), tokenize=False, add_generation_prompt=True)
    assert texts[0] == prompt + rows[0]["response"] + tok.eos_token
    assert texts[1].endswith("<|im_start|>assistant\n" + tok.eos_token)
    with pytest.raises(ValueError, match="not 'ask'"):
        calibration_texts("ask", rows, tok, spec=spec)


def test_export_records_and_reuses_its_calibration(wide, tmp_path):
    """The 4-bit files of an export are weighed by the texts given (the manifest says by what), the same
    texts reuse the export, other texts redo it, none quantize unweighted and say so."""
    _, _, folder, _ = wide
    adapter = E.random_lora(tmp_path / "adapter", base_dir=folder, r=4, seed=2)
    cfg = E.ExportConfig(variants=("q8_0", "q4_k_m"), imatrix_rows=3, verify_tokenizer=False)
    out = tmp_path / "gguf"
    m = E.export_adapter(adapter, out, cfg, calibration=TEXTS, calibration_label="four lines", progress=False)
    assert m["imatrix"]["texts"] == 3 and m["imatrix"]["dataset"] == "four lines" and m["imatrix"]["entries"] == 14
    assert m["files"]["q4_k_m"]["imatrix"] is True and m["imatrix_note"] is None
    assert _fields(out / E.FILES["q4_k_m"])["quantize.imatrix.chunks_count"] == 3
    stamp = (out / "manifest.json").stat().st_mtime_ns
    assert E.export_adapter(adapter, out, cfg, calibration=TEXTS[:3] + ["unused"], calibration_label="four lines",
                            progress=False) == m  # only the first three count: reused
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
    m2 = E.export_adapter(adapter, out, cfg, calibration=TEXTS[1:], calibration_label="three lines", progress=False)
    assert m2["imatrix"]["texts_sha256"] != m["imatrix"]["texts_sha256"]
    assert m2["files"]["q4_k_m"]["sha256"] != m["files"]["q4_k_m"]["sha256"]
    m3 = E.export_adapter(adapter, out, cfg, progress=False)
    assert m3["imatrix"] is None and "no calibration texts" in m3["imatrix_note"]
    assert m3["files"]["q4_k_m"]["imatrix"] is False and _fields(out / E.FILES["q4_k_m"]) == {}
    assert m3["files"]["q8_0"]["sha256"] == m["files"]["q8_0"]["sha256"]  # Q8_0 never weighed
    assert json.loads((out / "manifest.json").read_text())["imatrix"] is None


def test_role_calibration_needs_the_training_data(wide, tmp_path):
    _, _, folder, _ = wide
    adapter = E.random_lora(tmp_path / "adapter", base_dir=folder, r=4, seed=2)
    with pytest.raises(FileNotFoundError, match="imatrix_rows=0"):
        E.role_calibration("ask", adapter, 8, profile="smoke", data_root=tmp_path / "no-data")
    assert E.role_calibration("ask", adapter, 0, data_root=tmp_path / "no-data") == ([], "")


@pytest.mark.parametrize("a, b, sign", [
    ([(1, 1, 1)] * 20, [(1, 1, 1)] * 20, 0),  # the same outputs: difference 0, interval [0, 0]
    ([(1, 1, 1)] * 20, [(0, 1, 1)] * 10 + [(1, 1, 1)] * 10, 1),  # a right where b is wrong on half: a better
    ([(0, 2, 1)] * 5 + [(1, 1, 1)] * 15, [(1, 1, 1)] * 20, -1),  # a adds a wrong extra op on a quarter: worse
])
def test_paired_op_f1_difference(a, b, sign):
    from mags_lib.bench.imatrix import op_f1_difference

    rows = lambda xs: [{"sem_tp": t, "n_pred": p, "n_gold": g} for t, p, g in xs]
    d = op_f1_difference(rows(a), rows(b), n_boot=500)
    lo, hi = d["interval"]
    assert lo <= d["difference"] <= hi
    if sign == 0:
        assert d["difference"] == lo == hi == 0.0
    else:
        assert np.sign(d["difference"]) == sign and np.sign(lo) == np.sign(hi) == sign  # the interval excludes 0
    with pytest.raises(ValueError, match="same non-empty"):
        op_f1_difference(rows(a), rows(b)[:3])
