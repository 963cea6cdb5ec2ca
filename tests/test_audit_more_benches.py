"""Audit of the memory-bound, compaction, dates, consolidation and training-profile benchmarks.

Each test pins one defect found by the audit: a smoke (``--quick``) run replacing the full run's
result file that the README quotes, sizes that fail only after minutes of work (or are accepted and
written), result files written non-atomically, a training profile stopped by its deadline (or whose
stages were skipped or resumed) reported without saying it is partial, a consolidation row claiming
more facts than it used, and "the last weekend of <month>" read as its first weekend.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from mags_lib import repro

# ------------------------------------------------------------------------------------------------
# limits / compaction: --quick never replaces the full result; sizes checked before any work


def _stub_limits(monkeypatch):
    from mags_lib.bench import limits

    monkeypatch.setattr(limits, "bench_snapshots", lambda n, s: {"stub": True})
    monkeypatch.setattr(limits, "bench_recall_entry", lambda n: {"stub": True})
    monkeypatch.setattr(limits, "bench_log_and_coactivation", lambda *a: {"stub": True})
    return limits


def test_quick_runs_never_replace_the_full_results(tmp_path, monkeypatch, capsys):
    limits = _stub_limits(monkeypatch)
    full = tmp_path / "limits.json"
    full.write_text('{"full": true}')
    assert limits.main(["--quick", "--out", str(tmp_path)]) == 0
    assert json.loads(full.read_text()) == {"full": True}  # the README's figures are still there
    quick = json.loads((tmp_path / "limits_quick.json").read_text())
    assert quick["meta"]["params"]["n_nodes"] == 60

    from mags_lib.bench import compaction

    build = compaction._build
    monkeypatch.setattr(compaction, "_build", lambda cfg, n, **kw: build(cfg, 16, **kw))  # tiny conversations
    full = tmp_path / "compaction.json"
    full.write_text('{"full": true}')
    assert compaction.main(["--quick", "--out", str(tmp_path)]) == 0
    assert json.loads(full.read_text()) == {"full": True}
    assert json.loads((tmp_path / "compaction_quick.json").read_text())["meta"]["params"]["horizons"] == [600, 1200]


def test_limits_refuses_bad_sizes_before_any_work(tmp_path, monkeypatch, capsys):
    from mags_lib.bench import limits

    def no_work(*a, **k):
        raise AssertionError("the measurement started")

    monkeypatch.setattr(limits, "bench_snapshots", no_work)
    for kw, word in (({"n_nodes": 0}, "n_nodes"), ({"n_snapshots": -5}, "n_snapshots"), ({"n_recalls": 0}, "n_recalls"),
                     ({"oplog_cap": 0}, "oplog_cap"), ({"coact_cap": -1}, "coact_cap")):
        with pytest.raises(ValueError, match=word):
            limits.run(out_dir=tmp_path, progress=False, **kw)
    with pytest.raises(SystemExit):
        limits.main(["--snapshots", "-5", "--out", str(tmp_path)])
    assert "--snapshots" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


# ------------------------------------------------------------------------------------------------
# result files go through repro.atomic_write_text (an interruption never leaves a half-written JSON)


def test_bench_results_are_written_atomically(tmp_path, monkeypatch):
    written: list[str] = []
    real = repro.atomic_write_text

    def spy(path, text):
        written.append(Path(path).name)
        return real(path, text)

    monkeypatch.setattr(repro, "atomic_write_text", spy)
    limits = _stub_limits(monkeypatch)
    limits.run(n_nodes=5, n_snapshots=1, n_recalls=1, out_dir=tmp_path, progress=False)
    from mags_lib.bench import compaction, consolidation

    compaction.run(horizons=(16,), out_dir=tmp_path, progress=False)
    from mags_lib.bench import longevity

    longevity.run(n_turns=12, horizons=(12,), decay_rates=(0.01,), seeds=[0], out_dir=tmp_path, progress=False)
    monkeypatch.setattr(consolidation, "trainer_speed", lambda **kw: {"trainers": {}})
    consolidation.main(["--out", str(tmp_path)])
    want = ["limits.json", "compaction.json", "longevity.json", "consolidation_trainers.json"]
    from mags_lib.bench.locomo import load_locomo

    try:
        load_locomo(None)
    except (FileNotFoundError, ValueError):
        pass
    else:
        from mags_lib.bench import dates

        dates.run(out_dir=tmp_path, progress=False)
        want.append("dates.json")
    assert written == want
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]


# ------------------------------------------------------------------------------------------------
# training_profile: a run stopped by its deadline, or whose stages were skipped, is marked partial


def test_training_profile_marks_what_is_not_the_whole_profile(monkeypatch, tmp_path, capsys):
    from mags_lib import training
    from mags_lib.bench import training_profile as tp

    cfg = training.profile_config("answer", "smoke")
    sft_steps, grpo_steps = cfg.sft.max_steps, cfg.grpo.max_steps
    monkeypatch.setattr(training, "pick_backend", lambda b: "torch")

    def stopped(role, *, run_tag, config, backend, progress, callbacks):  # a deadline during the warm start
        type(callbacks[0]).hit = True
        return {"stages": {"sft": {"steps": 1, "skipped": False, "resumed_from": None, "wall_time_s": 3.0}}}

    monkeypatch.setattr(training, "train_role", stopped)
    r = tp.profile_role("answer", "smoke", "t", deadline_s=5)
    assert r["partial"] and r["stopped_by_deadline"]
    assert r["stages"]["sft"]["finished"] is False
    assert r["stages"]["grpo"] == {"steps": 0, "max_steps": grpo_steps, "finished": False, "started": False,
                                   "wall_time_s": None}  # listed, not silently absent
    assert any("grpo not started" in x for x in r["partial_reasons"])

    def skipped(role, *, run_tag, config, backend, progress, callbacks):  # the run tag already held both stages
        return {"stages": {"sft": {"steps": sft_steps, "skipped": True, "resumed_from": None, "wall_time_s": 0.0},
                           "grpo": {"steps": grpo_steps, "skipped": True, "resumed_from": None, "wall_time_s": 0.0}}}

    monkeypatch.setattr(training, "train_role", skipped)
    r = tp.profile_role("answer", "smoke", "t")
    assert r["partial"] and r["stages"]["sft"]["skipped"] and any("skipped" in x for x in r["partial_reasons"])

    def whole(role, *, run_tag, config, backend, progress, callbacks):
        return {"stages": {"sft": {"steps": sft_steps, "skipped": False, "resumed_from": None, "wall_time_s": 9.0},
                           "grpo": {"steps": grpo_steps, "skipped": False, "resumed_from": None, "wall_time_s": 9.0}}}

    monkeypatch.setattr(training, "train_role", whole)
    r = tp.profile_role("answer", "smoke", "t")
    assert r["partial"] is False and r["partial_reasons"] == []

    with pytest.raises(ValueError, match="deadline_s"):  # 0 meant "no deadline" and was recorded as 0 s
        tp.profile_role("answer", "smoke", "t", deadline_s=0)
    with pytest.raises(SystemExit):
        tp.main(["--role", "answer", "--deadline-s", "-1", "--out", str(tmp_path / "x.json")])
    assert "--deadline-s" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


# ------------------------------------------------------------------------------------------------
# consolidation: a row never claims more facts than the scenarios hold


def test_consolidation_refuses_more_facts_than_the_scenarios_hold(monkeypatch):
    import mags_lib
    from mags_lib.bench import consolidation

    three = [{"subject": f"S{i}", "relation": "likes", "object": f"o{i}", "family": "f", "scenario": "s",
              "new_object": None} for i in range(3)]
    monkeypatch.setattr(consolidation, "scenario_facts", lambda *a, **k: list(three))

    class NoModel:
        def __init__(self, *a, **k):
            raise AssertionError("a model was loaded")

    monkeypatch.setattr(mags_lib, "MAGS", NoModel)
    with pytest.raises(ValueError, match="hold 3 facts"):
        consolidation.recipe({}, n_facts=5)
    with pytest.raises(ValueError, match="hold 3 facts"):
        consolidation.trainer_speed(n_facts=5, steps=1)


# ------------------------------------------------------------------------------------------------
# dates: "the last weekend of <month>" is its last weekend


def test_last_weekend_of_a_month_is_not_its_first():
    from mags_lib.bench.dates import gold_period

    s = dt.date(2023, 7, 15)
    assert gold_period("last weekend of May 2023", s) == ("last weekend of", (dt.date(2023, 5, 27), dt.date(2023, 5, 28)))
    assert gold_period("first weekend of May 2023", s) == ("first weekend of", (dt.date(2023, 5, 6), dt.date(2023, 5, 7)))
    # a month ending on a Sunday: that Saturday and Sunday
    assert gold_period("last weekend of April 2023", s)[1] == (dt.date(2023, 4, 29), dt.date(2023, 4, 30))
