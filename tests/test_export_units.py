"""GGUF export, the parts that need no model: support checks, rotary layout, atomic writes, manifests,
trained-model resolution. (The export of a real model is in test_export.py, marked slow.)"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from mags_lib import export as E
from mags_lib.export import gguf_write, layout
from mags_lib.models import ModelNotFoundError

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
         "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_act": "silu",
         "rope_parameters": {"rope_type": "default", "rope_theta": 1e5}}


@pytest.mark.parametrize("change, fragment", [
    ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}, "LlamaForCausalLM models"),  # foreign
    ({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}, "convert_hf_to_gguf"),  # kin, not llama
    ({"attention_bias": True}, "biases"),  # llama with q/k/v biases
    ({"hidden_act": "gelu"}, "activation"),  # another MLP
    ({"head_dim": 80}, "head_dim"),  # head_dim not hidden / heads
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}, "rotary scaling"),  # scaled rope
])
def test_unsupported_configs_are_refused_with_the_reason(change, fragment):
    with pytest.raises(E.UnsupportedModelError, match=fragment):
        E.check_supported({**LLAMA, **change})


def test_a_llama_config_is_supported():
    E.check_supported(LLAMA)  # SmolLM2's shape: no exception


def _rope_hf(x, theta):
    """transformers' rotary embedding of one head: pairs (i, i + d/2) rotated by theta_i."""
    d = x.shape[0]
    cos, sin = np.cos(np.concatenate([theta, theta])), np.sin(np.concatenate([theta, theta]))
    rot = np.concatenate([-x[d // 2:], x[:d // 2]])
    return x * cos + rot * sin


def _rope_llamacpp(x, theta):
    """llama.cpp's (rope type "normal", the llama architecture): adjacent pairs (2i, 2i+1)."""
    out = x.copy()
    a, b = x[0::2], x[1::2]
    out[0::2] = a * np.cos(theta) - b * np.sin(theta)
    out[1::2] = a * np.sin(theta) + b * np.cos(theta)
    return out


def test_rotary_row_order_makes_both_ropes_agree():
    """Rows reordered for llama.cpp, then rotated by llama.cpp, equal rows rotated by transformers,
    then reordered: the exported q/k projections give llama.cpp the queries transformers computes."""
    rng = np.random.default_rng(0)
    n_head, d = 3, 8
    theta = rng.uniform(0, 3, size=d // 2)
    q = rng.normal(size=(n_head * d, 1))  # one query, as a column: the projection's output rows
    perm = gguf_write._permute_rotary(q, n_head)
    for h in range(n_head):
        hf = _rope_hf(q[h * d:(h + 1) * d, 0], theta)
        want = gguf_write._permute_rotary(hf[:, None], 1)[:, 0]  # the same reorder within one head
        got = _rope_llamacpp(perm[h * d:(h + 1) * d, 0], theta)
        np.testing.assert_allclose(got, want, atol=1e-12)
    assert not np.allclose(perm, q)  # the reorder is not the identity
    np.testing.assert_allclose(np.sort(perm, axis=0), np.sort(q, axis=0))  # a permutation of the rows


def test_atomic_file_leaves_nothing_when_interrupted(tmp_path):
    target = tmp_path / "model.gguf"
    with pytest.raises(KeyboardInterrupt), gguf_write._atomic_file(target) as tmp:
        tmp.write_bytes(b"GGUF half")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with gguf_write._atomic_file(target) as tmp:
        tmp.write_bytes(b"done")
    assert target.read_bytes() == b"done" and [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def _fake_adapter(folder, payload=b"weights"):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2}))
    (folder / "adapter_model.safetensors").write_bytes(payload)
    return folder


def _fake_export(adapter, variants=("q8_0", "lora"), skipped=None):
    gdir = adapter.parent / "gguf"
    gdir.mkdir()
    files = {}
    for v in variants:
        p = gdir / E.FILES[v]
        p.write_bytes(b"GGUF" + v.encode() * 10)
        files[v] = {"file": p.name, "size": p.stat().st_size, "sha256": E.file_sha256(p)}
    manifest = {"format": E.EXPORT_FORMAT, "version": 1, "exporter_version": layout.EXPORT_VERSION,
                "source_adapter": {"path": str(adapter), "sha256": layout._adapter_sha256(adapter)},
                "files": files, "skipped": skipped or {}}
    (gdir / "manifest.json").write_text(json.dumps(manifest))
    return gdir


def _run(root, role, tag, meta=None, stages=("sft", "grpo")):
    run = root / role / tag
    for s in stages:
        _fake_adapter(run / s, payload=f"{role}-{tag}-{s}".encode())
    meta = meta if meta is not None else {"format": "mags-trained-model", "role": role, "final_stage": stages[-1]}
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def test_final_adapter_is_the_final_stage_of_a_finished_run(tmp_path):
    run = _run(tmp_path, "ask", "default")
    assert E.final_adapter("ask", "default", models_root=tmp_path) == run / "grpo"
    (run / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "final_stage": "sft"}))
    assert E.final_adapter("ask", "default", models_root=tmp_path) == run / "sft"
    (run / "meta.json").write_text(json.dumps({"format": "mags-trained-model"}))  # unfinished: never exported
    with pytest.raises(ModelNotFoundError, match="no trained ask model"):
        E.final_adapter("ask", "default", models_root=tmp_path)
    shutil.rmtree(run / "grpo")
    (run / "meta.json").write_text(json.dumps({"format": "mags-trained-model", "final_stage": "grpo"}))
    with pytest.raises(ModelNotFoundError, match="holds no adapter_config.json"):
        E.final_adapter("ask", "default", models_root=tmp_path)


def test_missing_trained_model_lists_the_run_tags_that_exist(tmp_path):
    _run(tmp_path, "write", "smoke")
    _run(tmp_path, "write", "try2")
    with pytest.raises(ModelNotFoundError, match=r"smoke \(grpo\), try2 \(grpo\).*20_train_ask_write"):
        E.final_adapter("write", "default", models_root=tmp_path)


def test_the_agent_resolves_a_trained_role_to_its_checked_export(tmp_path):
    """MAGS.default(models="trained") resolves through training.layout.find_trained_model: with an export
    of this module, the manifest's default file, refused once the adapter changed."""
    from mags_lib.agent import find_trained_model

    run = _run(tmp_path, "write", "default")
    gdir = _fake_export(run / "grpo", variants=("q4_1", "q8_0", "lora"))
    manifest = json.loads((gdir / "manifest.json").read_text())
    (gdir / "manifest.json").write_text(json.dumps({**manifest, "default": "model-q4_1.gguf"}))
    assert find_trained_model("write", run_tag="default", backend="llamacpp", models_root=tmp_path) == \
        gdir / "model-q4_1.gguf"
    assert find_trained_model("write", run_tag="default", backend="transformers", models_root=tmp_path) == \
        run / "grpo"
    (run / "grpo" / "adapter_model.safetensors").write_bytes(b"retrained")  # the adapter changed since
    with pytest.raises(E.ExportError, match="another version"):
        find_trained_model("write", run_tag="default", backend="llamacpp", models_root=tmp_path)


def test_trained_gguf_resolves_checks_and_refuses_stale_exports(tmp_path):
    run = _run(tmp_path, "ask", "default")
    with pytest.raises(ModelNotFoundError, match="30_export_gguf"):  # trained, never exported
        E.trained_gguf("ask", "default", models_root=tmp_path)
    gdir = _fake_export(run / "grpo", skipped={"q4_1": "not asked for"})
    assert E.trained_gguf("ask", "default", "q8_0", models_root=tmp_path) == gdir / "model-q8_0.gguf"
    assert E.trained_gguf("ask", "default", "lora", models_root=tmp_path) == gdir / "lora-f32.gguf"
    with pytest.raises(ModelNotFoundError, match="not asked for"):
        E.trained_gguf("ask", "default", "q4_1", models_root=tmp_path)
    with pytest.raises(ValueError, match="variant"):
        E.trained_gguf("ask", "default", "q2_k", models_root=tmp_path)
    (gdir / "model-q8_0.gguf").write_bytes(b"GGUF cut")  # truncated after the export
    with pytest.raises(E.ExportError, match="truncated or replaced"):
        E.trained_gguf("ask", "default", "q8_0", models_root=tmp_path)
    (gdir / "model-q8_0.gguf").write_bytes(b"GGUF" + b"q8_0" * 10)
    (run / "grpo" / "adapter_model.safetensors").write_bytes(b"retrained")  # the adapter changed
    with pytest.raises(E.ExportError, match="another version"):
        E.trained_gguf("ask", "default", "q8_0", models_root=tmp_path)


def test_read_manifest_verifies_content_on_request(tmp_path):
    gdir = _fake_export(_fake_adapter(tmp_path / "run" / "sft"))
    assert set(E.read_manifest(gdir, verify="sha256")["files"]) == {"q8_0", "lora"}
    p = gdir / "lora-f32.gguf"
    p.write_bytes(p.read_bytes()[::-1])  # same size, other bytes
    E.read_manifest(gdir, verify="size")  # the cheap check cannot see it
    with pytest.raises(E.ExportError, match="sha256 differs"):
        E.read_manifest(gdir, verify="sha256")
    (gdir / "manifest.json").write_text("{not json")
    with pytest.raises(E.ExportError, match="corrupt"):
        E.read_manifest(gdir)
    assert E.read_manifest(tmp_path / "nowhere", missing_ok=True) is None


def test_unsupported_architecture_fails_before_anything_is_written(tmp_path):
    base = tmp_path / "gpt2-base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    adapter = _fake_adapter(tmp_path / "adapter")
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": str(base)}))
    out = tmp_path / "out" / "gguf"
    with pytest.raises(E.UnsupportedModelError, match="GPT2LMHeadModel"):
        E.export_adapter(adapter, out, progress=False)
    assert not (tmp_path / "out").exists()


def test_export_config_checks():
    with pytest.raises(ValueError, match="variants"):
        E.ExportConfig(variants=("q3_k",))
    with pytest.raises(ValueError, match="lora_dtype"):
        E.ExportConfig(lora_dtype="BF16")
    assert E.ExportConfig(variants=("Q8_0", "q8_0", "lora")).variants == ("q8_0", "lora")


def test_leftovers_of_a_killed_export_are_removed_but_not_those_of_a_live_one(tmp_path):
    import os
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(dead.stdout)
    (tmp_path / f".gguf.partial-{dead_pid}-x1").mkdir()
    (tmp_path / f".model-f16.gguf.partial-{dead_pid}").write_bytes(b"half")
    (tmp_path / f".gguf.old-{dead_pid}").mkdir()
    live = tmp_path / f".gguf.partial-{os.getpid()}-x2"
    live.mkdir()
    gguf_write._remove_stale(tmp_path, "gguf")
    gguf_write._remove_stale(tmp_path, "model-f16.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name]


def test_trained_gguf_default_is_the_manifest_default(tmp_path):
    run = _run(tmp_path, "write", "default")
    gdir = _fake_export(run / "grpo", variants=("q4_1", "lora"))
    manifest = json.loads((gdir / "manifest.json").read_text())
    manifest["default"] = "lora-f32.gguf"
    (gdir / "manifest.json").write_text(json.dumps(manifest))
    assert E.trained_gguf("write", "default", models_root=tmp_path) == gdir / "lora-f32.gguf"
    with pytest.raises(ValueError, match="default"):
        E.ExportConfig(default="q5_k")


def test_an_adapter_folder_without_weights_says_so(tmp_path):
    """PEFT took a folder with adapter_config.json but no weights for a hub repo name ("Repo id must be in the
    form 'repo_name'..."), in the export and in the transformers backend (found by an audit)."""
    from mags_lib.backends import load_backend
    from mags_lib.models import check_adapter_folder

    (tmp_path / "adapter_config.json").write_text("{}")
    for call in (lambda: check_adapter_folder(tmp_path),
                 lambda: E.export_adapter(tmp_path, tmp_path / "gguf", progress=False),
                 lambda: load_backend("transformers", model=tmp_path)):
        with pytest.raises(ModelNotFoundError, match="holds an adapter_config.json but no weights"):
            call()
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    assert check_adapter_folder(tmp_path) == tmp_path
