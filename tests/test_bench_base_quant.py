"""``python -m mags_lib.bench.base_quant``: the base model written as other GGUF types and measured beside the
embedded file (real models, tiny sizes)."""

import json

import pytest

from mags_lib.bench import base_quant


def test_cpu_info_lists_vector_sets():
    info = base_quant.cpu_info()
    assert set(info) == {"model", "flags"}
    assert all(f.startswith(("avx", "amx", "fma", "f16c")) for f in info["flags"])


def test_bad_types_and_sizes_are_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="unknown GGUF types"):
        base_quant.run(out=tmp_path / "x.json", types=("Q3_XS",), work_dir=tmp_path)
    with pytest.raises(ValueError, match=">= 1"):
        base_quant.run(out=tmp_path / "x.json", n_inputs=0, work_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.slow
def test_written_types_are_measured_beside_the_embedded_file(tmp_path):
    out = tmp_path / "base_quant.json"
    res = base_quant.run(out=out, types=("Q8_0",), threads=1, n_inputs=2, repeats=1, max_new_tokens=4,
                         max_role_tokens=12, work_dir=tmp_path / "gguf", progress=False)
    saved = json.loads(out.read_text())
    assert saved["summary"] == json.loads(json.dumps(res["summary"]))
    assert list(saved["files"]) == ["embedded (Q4_1)", "Q8_0"]
    for name, row in saved["files"].items():
        assert row["prompt_tokens"] > 0 and row["prompt_tokens_per_s"] > 0, name
        assert {r: len(v) for r, v in row["outputs"].items()} == {"ask": 2, "write": 2, "answer": 2}, name
    emb, q8 = saved["files"]["embedded (Q4_1)"], saved["files"]["Q8_0"]
    assert emb["equal_to_embedded"] == {"ask": 1.0, "write": 1.0, "answer": 1.0}
    assert emb["prompt_speed_vs_embedded"] == 1.0
    # each row ran its own file: the one written for its type (8.5 bits a weight against Q4_1's 5)
    assert q8["file"].endswith("base-q8_0.gguf") and emb["file"].endswith(".gguf") and emb["file"] != q8["file"]
    assert q8["size_mb"] > 1.3 * emb["size_mb"] > 0
    assert q8["prompt_tokens"] == emb["prompt_tokens"]  # the same prompts on every file
    # a second call keeps the written files (only measures)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "gguf").iterdir()}
    base_quant.write_base_variants(tmp_path / "gguf", ["Q8_0"])
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "gguf").iterdir()} == before
