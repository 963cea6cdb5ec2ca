"""bench.unsloth_gguf on this CPU machine: the file comparison, the weight error against exact weights, the
tokenizer probe's verdicts, and the clear stop without CUDA (Unsloth's export itself needs a GPU: its figures
come from a lent one, README "Unsloth's GGUF path")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mags_lib.bench import unsloth_gguf as U


def _write(path, meta: dict, tensors: dict) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    for k, v in meta.items():
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, list):
            w.add_array(k, v)
        else:
            w.add_uint32(k, v)
    for name, a in tensors.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture
def pair(tmp_path):
    rng = np.random.default_rng(0)
    same = rng.normal(size=(4, 32)).astype(np.float32)
    moved = rng.normal(size=(4, 32)).astype(np.float16)
    moved2 = moved.copy()
    moved2[1, 3] += np.float16(0.25)
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    _write(a, {"general.name": "ours", "only.a": 1, "tokenizer.ggml.tokens": [f"t{i}" for i in range(20)]},
           {"same": same, "moved": moved, "gone": same, "reshaped": same, "retyped": same})
    _write(b, {"general.name": "theirs", "only.b": 2, "tokenizer.ggml.tokens": [f"t{i}" for i in range(20)]},
           {"same": same, "moved": moved2, "new": same, "reshaped": same.reshape(8, 16),
            "retyped": same.astype(np.float16)})
    return a, b, {"same": same, "moved": moved, "moved2": moved2}


def test_compare_gguf_names_every_difference(pair):
    a, b, arr = pair
    c = U.compare_gguf(a, b)
    m = c["metadata"]
    assert m["only_a"] == ["only.a"] and m["only_b"] == ["only.b"]
    assert [d["key"] for d in m["differ"]] == ["general.name"]  # the equal token list is not reported
    assert m["differ"][0]["a"] == "ours" and m["differ"][0]["b"] == "theirs"
    t = c["tensors"]
    assert t["only_a"] == ["gone"] and t["only_b"] == ["new"]
    assert [s["tensor"] for s in t["shape_differs"]] == ["reshaped"]
    assert t["type_differs"] == [{"tensor": "retyped", "a": "F32", "b": "F16"}]
    assert t["byte_identical"] == 1  # "same"
    want = float(np.abs(arr["moved"].astype(np.float32) - arr["moved2"].astype(np.float32)).max())
    assert t["max_abs_diff"] == pytest.approx(want) and t["max_abs_diff_tensor"] == "moved"
    assert t["worst_relative"][0]["tensor"] == "moved"
    same_file = U.compare_gguf(a, a)
    assert same_file["metadata"] == {"only_a": [], "only_b": [], "differ": []}
    assert same_file["tensors"]["byte_identical"] == 5 and same_file["tensors"]["max_abs_diff"] == 0.0


def test_weight_error_against_exact_weights(pair):
    a, b, arr = pair
    exact = {"same": arr["same"], "moved": arr["moved"].astype(np.float32), "absent": arr["same"]}
    e = U.weight_error(b, exact)
    d = arr["moved2"].astype(np.float32) - arr["moved"].astype(np.float32)
    ref2 = float((arr["same"] ** 2).sum() + (arr["moved"].astype(np.float32) ** 2).sum())
    assert e["rel_rms_error"] == pytest.approx((float((d ** 2).sum()) / ref2) ** 0.5)
    assert e["max_abs_error_tensor"] == "moved" and e["missing"] == ["absent"]
    assert U.weight_error(a, {"same": arr["same"]})["rel_rms_error"] == 0.0


def test_file_summary_counts_types(pair):
    a, _, _ = pair
    s = U.file_summary(a)
    assert s["n_tensors"] == 5 and s["tensor_types"] == {"F32": 4, "F16": 1} and len(s["sha256"]) == 64


@pytest.mark.parametrize("body, status", [("pass", "same"), ("raise SystemExit('tokens differ')", "differs"),
                                           ("import os; os.abort()", "aborted")])
def test_tokenizer_probe_verdicts(monkeypatch, tmp_path, body, status):
    """llama.cpp aborts the whole process on some vocabularies (Unsloth's SmolLM2 files here): the probe runs
    in a child and tells an abort from a difference."""
    monkeypatch.setattr(U, "_PROBE", body)
    assert U.tokenizer_probe(tmp_path / "x.gguf", tmp_path)["status"] == status


def test_without_cuda_it_stops_before_writing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "out" / "u.json"
    with pytest.raises(RuntimeError, match="CUDA"):
        U.main(["--role", "write", "--adapter", str(tmp_path / "adapter"), "--work-dir", str(tmp_path / "w"),
                "--out", str(out)])
    assert not out.exists() and not (tmp_path / "w").exists()


def test_rescore_refuses_answer_files(tmp_path):
    f = tmp_path / "parity_answer.jsonl"
    f.write_text(json.dumps({"role": "answer", "files": {}}) + "\n")
    with pytest.raises(ValueError, match="aliases"):
        U.rescore(f)
