"""The one metrics shape, the stage extractors, collect() and the README results block (no models).

The fixtures under tests/data/results_fixtures/ are real smoke-profile metrics.json files (45 from
the consolidation branch's smoke run; 70 written by hand in LoCoMoBenchResult.metrics()'s shape).
Expected values below were read off the fixtures by eye, not recomputed by the code under test.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from mags_lib import results

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "data" / "results_fixtures"


def load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def good(**kw) -> dict:
    rec = {"name": "rag accuracy", "value": 0.5, "unit": "accuracy", "n": 8, "interval": [0.25, 0.75],
           "source": "notebooks/50_game_evaluation.ipynb"}
    rec.update(kw)
    return rec


def by_name(recs: list) -> dict:
    return {r["name"]: r for r in recs}


# ------------------------------------------------------------------------------------------------
# the record shape
@pytest.mark.parametrize("change, field", [
    ({"name": ""}, "'name'"),                       # empty name
    ({"unit": 3}, "'unit'"),                        # unit not a string
    ({"source": None}, "'source'"),                 # no source
    ({"value": "0.5"}, "'value'"),                  # number as text
    ({"value": float("nan")}, "'value'"),           # NaN must be null, not NaN
    ({"value": True}, "'value'"),                   # a bool is not a measurement
    ({"n": -1}, "'n'"),                             # negative sample size
    ({"n": 2.5}, "'n'"),                            # fractional sample size
    ({"interval": [0.75, 0.25]}, "lo > hi"),        # reversed interval
    ({"interval": [0.1]}, "'interval'"),            # one bound only
    ({"interval": [0.1, float("inf")]}, "'interval'"),  # infinite bound
])
def test_bad_field_is_rejected_with_its_name(change, field):
    with pytest.raises(ValueError, match=field):
        results.validate_record(good(**change))


def test_unknown_and_missing_keys_are_named():
    rec = good(extra=1)
    with pytest.raises(ValueError, match=r"unknown \['extra'\]"):
        results.validate_record(rec)
    rec = good()
    del rec["n"]
    with pytest.raises(ValueError, match=r"missing \['n'\]"):
        results.validate_record(rec)


def test_valid_record_and_nulls_pass():
    results.validate_record(good())
    results.validate_record(good(value=None, n=None, interval=None))
    assert results.record("x", float("nan"), "F1", source="s")["value"] is None


# ------------------------------------------------------------------------------------------------
# writing and reading
def test_round_trip_keeps_details_and_derives_stage(tmp_path):
    details = load("50_game_evaluation.json")
    out = tmp_path / "results" / "t1" / "50_game_evaluation"
    out.mkdir(parents=True)
    results.write_metrics(out, details)
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["format"] == "mags-metrics/1"
    assert doc["stage"] == "50_game_evaluation"
    assert doc["source"] == "notebooks/50_game_evaluation.ipynb"
    assert doc["accuracy"] == details["accuracy"]  # old readers keep their keys
    assert by_name(doc["records"])["rag accuracy"]["value"] == 0.25
    assert results.read_metrics(out / "metrics.json")["records"] == doc["records"]


def test_matrix_stage_and_explicit_records(tmp_path):
    out = tmp_path / "t2" / "20_train_ask_write" / "ask"
    out.mkdir(parents=True)
    results.write_metrics(out, {"role": "ask"}, records=[good(name="a")])
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["stage"] == "20_train_ask_write/ask"
    assert doc["source"] == "notebooks/20_train_ask_write.ipynb"
    assert doc["records"] == [good(name="a")]


@pytest.mark.parametrize("key", results.RESERVED_KEYS)
def test_reserved_key_collision_refused(tmp_path, key):
    out = tmp_path / "t" / "50_game_evaluation"
    out.mkdir(parents=True)
    with pytest.raises(ValueError, match=f"reserved key.*{key}"):
        results.write_metrics(out, {key: 1, "accuracy": {}})
    assert not (out / "metrics.json").exists()


def test_invalid_or_repeated_record_refused_and_nothing_written(tmp_path):
    out = tmp_path / "t" / "50_game_evaluation"
    out.mkdir(parents=True)
    with pytest.raises(ValueError, match="record 1.*'unit'"):
        results.write_metrics(out, {}, records=[good(name="a"), good(name="b", unit="")])
    with pytest.raises(ValueError, match="record 1: name 'a' repeats"):
        results.write_metrics(out, {}, records=[good(name="a"), good(name="a")])
    assert not (out / "metrics.json").exists()


def test_not_a_stage_folder(tmp_path):
    with pytest.raises(ValueError, match="not a stage folder"):
        results.write_metrics(tmp_path / "somewhere", {}, records=[])


# ------------------------------------------------------------------------------------------------
# extractors on real details
def test_extract_10_before_row():
    recs = by_name(results.extract_records("10_generate_datasets", load("10_generate_datasets.json")))
    assert len(recs) == 14  # ask, write: 2 modes x 3 metrics; answer: free x 2
    assert recs["before gen_ask_smoke free adherence"]["value"] == 0.5
    assert recs["before gen_ask_smoke free op_f1"]["value"] == 0.4
    assert recs["before gen_ask_smoke grammar exact_f1"]["value"] == pytest.approx(1 / 3)
    assert recs["before gen_write_smoke free op_f1"]["value"] == 0.4
    assert recs["before gen_write_smoke free exact_f1"]["value"] == 0.0
    assert recs["before gen_write_smoke free adherence"]["n"] == 2
    assert recs["before gen_ask_smoke free op_f1"]["unit"] == "F1"
    assert "before gen_ask_smoke free accuracy" not in recs  # NaN columns of another role: no record


def test_extract_20_answer_and_ask():
    recs = by_name(results.extract_records("20_train_ask_write/answer", load("20_train_ask_write_answer.json")))
    assert len(recs) == 8  # base/sft/grpo x (accuracy, abstain_acc) + 2 training times
    assert recs["answer base gen_answer_smoke free accuracy"]["value"] == 0.5
    assert recs["answer grpo gen_answer_smoke free abstain_acc"]["value"] == 0.0
    assert recs["answer sft training wall time"] == {
        "name": "answer sft training wall time", "value": 22.4, "unit": "s", "n": 3, "interval": None,
        "source": "notebooks/20_train_ask_write.ipynb"}
    assert recs["answer grpo training wall time"]["value"] == 21.6
    ask = by_name(results.extract_records("20_train_ask_write/ask", load("20_train_ask_write_ask.json")))
    assert ask["ask base gen_ask_smoke free op_f1"]["value"] == 0.4
    assert ask["ask sft gen_ask_smoke free adherence"]["value"] == 0.0
    assert ask["ask sft training wall time"]["value"] == 15.8


def test_extract_30_export():
    recs = by_name(results.extract_records("30_export_gguf", load("30_export_gguf.json")))
    assert recs["ask q8_0 top-1 agreement"]["value"] == 1.0
    assert recs["ask q8_0 top-1 agreement"]["n"] == 32
    assert recs["ask export"]["value"] == pytest.approx(6.4235, abs=1e-4)
    assert recs["llamacpp adapter switch p50"]["value"] == pytest.approx(7.8537e-05, rel=1e-4)
    assert recs["ask p50"]["value"] == pytest.approx(0.8378, abs=1e-4)
    assert recs["observe p50"]["value"] == pytest.approx(1.7618, abs=1e-4)
    assert recs["ask q8_0 adherence"]["value"] == 0.0 and recs["ask q8_0 op F1"]["n"] == 2
    assert "ask q8_0 answer accuracy" not in recs  # a null metric (not the role's) is no record


def test_extract_45_consolidation():
    recs = by_name(results.extract_records("45_consolidation", load("45_consolidation.json")))
    assert recs["closed-book accuracy before"]["value"] == 0.0
    assert recs["closed-book accuracy after"]["n"] == 6
    assert recs["perplexity change (after - before)"]["value"] == pytest.approx(52.9803 - 55.0998, abs=1e-3)
    assert recs["consolidation"]["value"] == 36.16
    assert recs["open-book accuracy before"]["value"] == pytest.approx(1 / 3)
    assert recs["open-book accuracy after"]["n"] == 3
    assert recs["abstains on facts not consolidated, after"]["value"] == 0.0
    assert recs["changed facts: open-book answers the new value"]["n"] == 2
    assert "open-book accuracy after, adapter closed-book only" not in recs  # written before the serving policy
    d = load("45_consolidation.json")
    d["after"]["open_book_adapter_closed_only"] = {"accuracy": 0.5, "n": 4}
    d["changed"]["open_book_new_adapter_closed_only"] = 0.75
    recs = by_name(results.extract_records("45_consolidation", d))
    assert recs["open-book accuracy after, adapter closed-book only"]["value"] == 0.5
    got = recs["changed facts: open-book answers the new value, adapter closed-book only"]
    assert got["value"] == 0.75 and got["n"] == d["changed"]["n"]
    assert not any("reader abstains" in name for name in recs)  # written before the fallback policy
    d["after"]["open_book_adapter_fallback"] = {"accuracy": 0.25, "n": 4}
    d["changed"]["open_book_new_adapter_fallback"] = 0.5
    recs = by_name(results.extract_records("45_consolidation", d))
    assert recs["open-book accuracy after, adapter closed-book or when the reader abstains"]["value"] == 0.25
    assert recs["changed facts: open-book answers the new value, adapter closed-book or when the reader abstains"][
        "value"] == 0.5


def test_extract_50_game_with_intervals():
    recs = by_name(results.extract_records("50_game_evaluation", load("50_game_evaluation.json")))
    assert recs["graph_base accuracy"]["value"] == 0.125
    assert recs["graph_base accuracy"]["interval"] == [0.0, 0.25]
    assert recs["graph_base accuracy"]["n"] == 8
    assert recs["full_context accuracy"]["value"] == 0.25
    assert recs["rag ask p50"]["value"] == pytest.approx(1.2794, abs=1e-4)
    assert "graph_trained accuracy" not in recs  # skipped system: no number invented


def test_shared_memo_runs_report_no_latency():
    """Under a shared generation memo a remembered call takes 0 s: no turn latency is a model's latency."""
    d = load("50_game_evaluation.json")
    assert "rag ask p50" in by_name(results.extract_records("60_ablations", {**d, "generation_memo": None}))
    shared = {**d, "generation_memo": {"hits": 3, "misses": 5}}
    for stage in ("50_game_evaluation", "60_ablations"):
        recs = by_name(results.extract_records(stage, shared))
        assert recs["graph_base accuracy"]["value"] == 0.125  # accuracy stays
        assert not any(name.endswith(" p50") for name in recs), stage
    # notebook 60 always shared its generations: an old file without the key reports no latency either
    assert not any(name.endswith(" p50") for name in by_name(results.extract_records("60_ablations", d)))


def test_extract_55_textworld_and_skipped():
    recs = by_name(results.extract_records("55_textworld", load("55_textworld.json")))
    assert recs["mags_base state accuracy"]["value"] == 0.25
    assert recs["mags_base state accuracy"]["interval"] == [0.0, 0.5]
    assert recs["mags_base state accuracy"]["n"] == 8
    assert recs["treasure_hunter/none steps"]["value"] == 9.0
    assert recs["treasure_hunter/perfect success"]["value"] == 1.0
    assert results.extract_records("55_textworld", {"skipped": True, "reason": "no jericho"}) == []


def test_extract_70_locomo_and_skipped():
    recs = by_name(results.extract_records("70_locomo_benchmark", load("70_locomo_benchmark.json")))
    assert recs["mags recall@5"]["value"] == 0.6
    assert recs["bm25 recall@10"]["value"] == 0.7
    assert recs["mags recall@5"]["n"] == 10
    assert not any("cat" in k for k in recs)  # per-category rows stay in the details
    assert recs["full_context QA"]["value"] == 0.31
    assert recs["full_context QA"]["unit"] == "F1"
    assert results.extract_records("70_locomo_benchmark", {"status": "skipped", "reason": "no LoCoMo"}) == []


def test_extract_00_tokens_per_s():
    recs = by_name(results.extract_records("00_environment_check", {"generation": {
        "llamacpp_tokens_per_s": 50.0, "transformers_tokens_per_s": 12.5}}))
    assert recs["llamacpp generation"]["value"] == 50.0
    assert recs["transformers generation"]["unit"] == "tokens/s"


def test_unknown_stage_has_no_extractor():
    with pytest.raises(ValueError, match="no record extractor for stage '99_new'"):
        results.extract_records("99_new", {})


# ------------------------------------------------------------------------------------------------
# collect
def make_run(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    run = root / "r"
    for stage, details in [("50_game_evaluation", load("50_game_evaluation.json")),
                           ("55_textworld", {"skipped": True, "reason": "jericho is not installed"}),
                           ("20_train_ask_write/answer", load("20_train_ask_write_answer.json"))]:
        (run / stage).mkdir(parents=True)
        results.write_metrics(run / stage, details)
    (run / "40_graph_dynamics").mkdir(parents=True)
    (run / "40_graph_dynamics" / "meta.json").write_text(json.dumps(
        {"git_sha": "abc123", "cpu_count": 2, "platform": "Linux-x", "written_at": "2026-11-23T20:00:00+0000",
         "params": {"profile": "smoke"}}))
    state = {"profile": "smoke", "notebooks": {
        "50_game_evaluation": {"status": "done", "wall_time_s": 12.5, "peak_mem_mb": 900.0},
        "40_graph_dynamics": {"status": "done", "wall_time_s": 3.0},
        "30_export_gguf": {"status": "failed", "error": {"ename": "RuntimeError", "evalue": "boom",
                                                         "cell_index": 7}},
        "60_ablations": {"status": "running"}}}
    (run / "pipeline.json").write_text(json.dumps(state))
    return root


def test_collect_statuses(tmp_path):
    records, status, info = results.collect("r", make_run(tmp_path))
    st = status.set_index("stage")
    assert st.loc["50_game_evaluation", "status"] == "done"
    assert st.loc["50_game_evaluation", "wall_time_s"] == 12.5
    assert st.loc["55_textworld", "status"] == "skipped"
    assert st.loc["55_textworld", "reason"] == "jericho is not installed"
    assert st.loc["30_export_gguf", "status"] == "failed"
    assert "RuntimeError: boom" in st.loc["30_export_gguf", "reason"]
    assert st.loc["60_ablations", "status"] == "missing"  # running, no metrics file: never filled in
    assert st.loc["10_generate_datasets", "status"] == "missing"
    assert st.loc["20_train_ask_write/ask", "status"] == "missing"
    assert st.loc["20_train_ask_write/answer", "status"] == "done"
    assert st.loc["40_graph_dynamics", "status"] == "no metrics"
    assert "--only 20 -p role=ask" in st.loc["20_train_ask_write/ask", "command"]
    assert set(records["stage"]) == {"50_game_evaluation", "20_train_ask_write/answer"}
    assert info["git_sha"] == "abc123" and info["profile"] == "smoke" and "2 CPU" in info["machine"]


def test_a_running_stage_whose_runner_is_gone_reads_interrupted(tmp_path):
    import platform
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process (pids are not reused this fast)
    root = make_run(tmp_path)
    state_path = root / "r" / "pipeline.json"
    state = json.loads(state_path.read_text())
    here = platform.node()
    state["notebooks"].update({
        "60_ablations": {"status": "running", "started_at": "2026-11-25T01:12:39+00:00",
                         "runner": {"pid": dead.pid, "host": here}},
        "45_consolidation": {"status": "running", "runner": {"pid": os.getpid(), "host": here}},
        "70_locomo_benchmark": {"status": "running", "runner": {"pid": dead.pid, "host": here + "-elsewhere"}}})
    state_path.write_text(json.dumps(state))
    st = results.collect("r", root)[1].set_index("stage")
    assert st.loc["60_ablations", "status"] == "missing"
    assert st.loc["60_ablations", "reason"].startswith(f"interrupted: its runner (pid {dead.pid})")
    assert st.loc["45_consolidation", "reason"] == "running now (started None)"  # alive: running
    assert st.loc["70_locomo_benchmark", "reason"] == "running now (started None)"  # another host: not probed


@pytest.mark.parametrize("status", ["interrupted", "running"])
def test_a_rerun_that_did_not_finish_never_shows_the_earlier_metrics_as_done(tmp_path, status):
    """A rerun stopped part-way (Ctrl-C, SIGTERM) leaves the earlier run's metrics.json beside its record:
    the stage is not done, and the earlier figures are not this run's."""
    root = make_run(tmp_path)
    state_path = root / "r" / "pipeline.json"
    state = json.loads(state_path.read_text())
    state["notebooks"]["50_game_evaluation"].update(status=status, started_at="2026-12-07T06:00:00+00:00")
    state["notebooks"]["40_graph_dynamics"].update(status=status)  # a notebook without metrics, by design
    state_path.write_text(json.dumps(state))
    records, status_df, _ = results.collect("r", root)
    st = status_df.set_index("stage")
    assert st.loc["50_game_evaluation", "status"] == "missing"
    assert "earlier run's: left out" in st.loc["50_game_evaluation", "reason"]
    assert st.loc["40_graph_dynamics", "status"] == "missing"
    assert "50_game_evaluation" not in set(records["stage"])


def test_regenerating_from_a_missing_run_keeps_the_report_and_the_readme(tmp_path, capsys):
    reports = tmp_path / "reports"
    reports.mkdir()
    shutil.copy(ROOT / "reports" / "default.json", reports / "default.json")
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    before = (readme.read_text(), (reports / "default.json").read_text())
    args = ["readme", "--readme", str(readme), "--reports-dir", str(reports)]
    for tag, root, message in [("default", tmp_path / "fresh_clone", "has no results at"),  # no results/ yet
                               ("defualt", tmp_path / "fresh_clone", "has no results at"),  # a typo
                               ("../../x", tmp_path, "must be a folder name")]:
        assert results.main([*args, "--run-tag", tag, "--results-root", str(root)]) == 2
        assert message in capsys.readouterr().err
    assert (readme.read_text(), (reports / "default.json").read_text()) == before
    assert sorted(p.name for p in reports.iterdir()) == ["default.json"]
    assert not (tmp_path / "x.json").exists()


def test_bad_report_or_readme_files_are_clear_errors(tmp_path, capsys):
    reports = tmp_path / "reports"
    reports.mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("## Results\n<!-- results:begin -->\n<!-- results:end -->\n")
    args = ["readme", "--run-tag", "r", "--readme", str(readme), "--reports-dir", str(reports)]
    for text in ("{trunc", "{}", "[]"):
        (reports / "r.json").write_text(text)
        assert results.main([*args, "--check"]) == 2
        assert "is not a report of python -m mags_lib.results" in capsys.readouterr().err
    # a README without the block: refused before the report is written (the two would disagree)
    (reports / "r.json").unlink()
    readme.write_text("## Results\n")
    assert results.main([*args, "--results-root", str(make_run(tmp_path))]) == 2
    assert "results:begin" in capsys.readouterr().err and not (reports / "r.json").exists()
    (tmp_path / "results" / "r" / "pipeline.json").write_text("{trunc")
    readme.write_text("## Results\n<!-- results:begin -->\n<!-- results:end -->\n")
    assert results.main([*args, "--results-root", str(tmp_path / "results")]) == 2
    assert "pipeline.json is not valid JSON" in capsys.readouterr().err


def test_collect_reads_old_metrics_without_records(tmp_path):
    run = tmp_path / "results" / "old" / "50_game_evaluation"
    run.mkdir(parents=True)
    shutil.copy(FIX / "50_game_evaluation.json", run / "metrics.json")
    records, status, _ = results.collect("old", tmp_path / "results")
    assert status.set_index("stage").loc["50_game_evaluation", "status"] == "done"
    assert (records["name"] == "rag accuracy").any()


# ------------------------------------------------------------------------------------------------
# the README block
def test_readme_render_and_check(tmp_path, capsys):
    data = results.report_data("r", make_run(tmp_path))
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "r.json").write_text(json.dumps(data))
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Results\n\nhand text\n\n<!-- results:begin -->\n<!-- results:end -->\n\nafter\n")
    args = ["readme", "--run-tag", "r", "--readme", str(readme), "--reports-dir", str(reports)]
    assert results.main([*args, "--check"]) == 1  # empty block differs
    results.update_readme(readme, data)
    text = readme.read_text()
    assert text.startswith("# x\n\n## Results\n\nhand text\n") and text.endswith("\n\nafter\n")
    assert "| 50_game_evaluation | graph_base accuracy | 0.125 | accuracy | 8 | [0, 0.25] |" in text
    # the profile the run tag holds (the runner refuses a default run into a smoke tag: the command would fail)
    assert "- missing: 10_generate_datasets — run `python -m mags_lib.pipeline --profile smoke --run-tag r --only 10`" in text
    assert "- skipped: 55_textworld — jericho is not installed" in text
    assert results.main([*args, "--check"]) == 0
    readme.write_text(text.replace("| 0.125 |", "| 0.135 |"))
    capsys.readouterr()
    assert results.main([*args, "--check"]) == 1
    assert "0.135" in capsys.readouterr().err


def test_committed_readme_matches_committed_report():
    assert results.main(["readme", "--check", "--run-tag", "default"]) == 0


def test_readme_without_markers_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("## Results\n")
    with pytest.raises(ValueError, match="results:begin"):
        results.update_readme(readme, {"run_tag": "r", "status": [], "records": []})


def test_nan_never_reaches_a_record():
    recs = results.extract_records("10_generate_datasets", load("10_generate_datasets.json"))
    assert all(r["value"] is None or math.isfinite(r["value"]) for r in recs)


def test_extract_55_agent_rows_count_their_own_episodes():
    """Every agent record took the state study's ``n_games`` (30 games) as its n, although the treasure-hunter rows
    cover ``agent_games`` episodes and the cooking rows ``n_episodes`` episodes of one game."""
    d = load("55_textworld.json")
    d["n_games"] = 30
    d["agent"] = {"treasure_hunter/none": {"success": 0.4, "steps": 20.0, "steps_ci": [15.0, 25.0], "episodes": 5},
                  "cooking/none": {"success": 0.0, "steps": 30.0, "steps_ci": [30.0, 30.0], "episodes": 3}}
    recs = by_name(results.extract_records("55_textworld", d))
    assert recs["treasure_hunter/none success"]["n"] == recs["treasure_hunter/none steps"]["n"] == 5
    assert recs["cooking/none success"]["n"] == recs["cooking/none steps"]["n"] == 3
    assert recs["mags_base state accuracy"]["n"] == 8  # the state questions keep theirs
    # a file from before the episodes were recorded: no n, rather than the state study's game count
    old = by_name(results.extract_records("55_textworld", {**load("55_textworld.json"), "n_games": 30}))
    assert old["treasure_hunter/none steps"]["n"] is None
