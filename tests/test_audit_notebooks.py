"""Notebook audit: what each notebook shows and records is what it computed, as the parameters asked.

Static checks of the committed notebook JSON (and of cells executed with stand-ins), no papermill run: each test
fails on the notebooks before the audit."""

from __future__ import annotations

import ast
import json
import types
from pathlib import Path

import pytest

from mags_lib import pipeline
from mags_lib.nbparams import FALSE_WORDS, TRUE_WORDS, as_bool

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _src(cell: dict) -> str:
    return "".join(cell["source"])


def _cell(path: Path, cell_id: str) -> str:
    return next(_src(c) for c in _cells(path) if c.get("id") == cell_id)


def _after_parameters(path: Path) -> str:
    """The code cell right after the ``parameters`` cell: where derived values are computed."""
    cells = _cells(path)
    i = next(i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", []))
    return next(_src(c) for c in cells[i + 1:] if c["cell_type"] == "code")


# --- 1. bool parameters given through papermill's own command line -------------------------------------------

BOOL_PARAMS = [(p, name) for p in NOTEBOOKS for name, spec in pipeline.inspect_parameters(p).items()
               if spec["type"] == "bool"]


def test_there_are_bool_parameters():
    assert {(p.stem, n) for p, n in BOOL_PARAMS} >= {("10_generate_datasets", "run_before"), ("30_export_gguf", "force"),
                                                     ("50_game_evaluation", "examples")}


@pytest.mark.parametrize("path,name", BOOL_PARAMS, ids=lambda x: getattr(x, "stem", x))
def test_bool_parameter_means_what_papermill_was_told(path, name):
    """``papermill nb.ipynb out.ipynb -p force false`` injects ``force = "false"`` (papermill turns only the exact
    ``True``/``False`` into booleans): a truthy string that re-exported, re-ran the before row, played the example
    files... The cell after the parameters makes it a bool before anything reads it."""
    from papermill.cli import _resolve_type

    derived = _after_parameters(path)
    line = f'{name} = as_bool("{name}", {name})'
    assert line in derived, f"{path.name}: the derived cell does not normalise bool parameter {name}"
    assert "from mags_lib.nbparams import as_bool" in derived
    for written, meant in (("false", False), ("False", False), ("no", False), ("0", False), ("true", True), ("True", True)):
        ns = {"as_bool": as_bool, name: _resolve_type(written)}  # what papermill's -p injects
        exec(line, ns)
        assert ns[name] is meant, (written, ns[name])


def test_as_bool_accepts_what_the_pipeline_accepts_and_refuses_the_rest():
    assert TRUE_WORDS == pipeline._TRUE and FALSE_WORDS == pipeline._FALSE
    for w in TRUE_WORDS:
        assert as_bool("x", w) is True and as_bool("x", w.upper()) is True
    for w in FALSE_WORDS:
        assert as_bool("x", w) is False
    for bad in ("flase", "", 2, None, 0.5):
        with pytest.raises(ValueError, match="parameter x"):
            as_bool("x", bad)


# --- 2. notebook 50 plays this run's trained models, not those of run tag "default" --------------------------

def _calls(source: str, attr: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == attr]


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if "profile_base(" in "".join(_src(c) for c in _cells(p))],
                         ids=lambda p: p.stem)
def test_game_notebooks_read_the_trained_models_of_their_own_run(path):
    """``game.profile_base`` without ``trained_tag`` leaves MAGSConfig's default, run tag ``default``: notebook 50 of
    a smoke run (or of ``--run-tag try2``) played ``graph_trained`` / ``rag_trained`` / ``full_context_trained`` with
    the default run's models (or skipped them as missing although notebooks 20 and 30 of the run had just trained
    and exported its own), while notebook 60 of the same run used the run's."""
    assert "trained_tag" in pipeline.inspect_parameters(path), f"{path.name}: no trained_tag parameter"
    calls = [c for cell in _cells(path) if cell["cell_type"] == "code" for c in _calls(_src(cell), "profile_base")]
    assert calls
    for call in calls:
        kw = {k.arg: ast.unparse(k.value) for k in call.keywords}
        assert kw.get("trained_tag") == "trained_tag or run_tag", (path.name, kw)


# --- 3. smoke-profile comparisons are not stated as findings -------------------------------------------------

def test_notebook_25_marks_smoke_findings_as_toy_checks():
    """In smoke (2 held-out examples, 2 mini-scenarios, a few GRPO steps) notebook 25 printed, and wrote to
    metrics.json, lines such as ``outcome: held-out outcome 0.500 vs imitation 0.000 ...: met``."""
    src = _cell(ROOT / "notebooks" / "25_training_objectives.ipynb", "b5bbf777")
    lines = ["graph_cost-0.5: operations per input -40% ...: met", "outcome: ... (target: at least as good): met"]
    obj = types.SimpleNamespace(plot_tradeoff=lambda *a, **k: None, findings=lambda table: list(lines))
    printed = []
    for profile, marked in (("smoke", True), ("default", False)):
        ns = {"obj": obj, "table": None, "out_dir": Path("/nonexistent"), "profile": profile, "n_per_set": 2,
              "n_scen": 2, "print": printed.append}
        exec(src, ns)
        assert all(("not a finding" in f) is marked for f in ns["findings"]), ns["findings"]
    assert all("not a finding" in p for p in printed[:2]) and not any("not a finding" in p for p in printed[2:])


def test_notebook_20_marks_the_smoke_stage_comparison(tmp_path):
    """``grpo_beats_sft`` of a smoke run (2 held-out examples, a few steps) was printed and recorded bare."""
    import pandas as pd

    src = _cell(ROOT / "notebooks" / "20_train_ask_write.ipynb", "5fc3659c")
    scores = pd.DataFrame([{"stage": "sft", "engine": "llamacpp", "set": "gen_write_smoke", "mode": "free", "n": 2}])
    report = types.SimpleNamespace(evaluate_run=lambda *a, **k: scores,
                                   stage_comparison=lambda *a, **k: {"per_stage": {"sft": 0.0, "grpo": 0.5},
                                                                     "grpo_beats_sft": True},
                                   read_log=lambda *a, **k: [])
    training = types.SimpleNamespace(run_dir=lambda *a: tmp_path / "model")
    for profile in ("smoke", "default"):
        out_dir = tmp_path / "results" / "r" / "20_train_ask_write" / "write"
        out_dir.mkdir(parents=True, exist_ok=True)
        ns = {"report": report, "training": training, "role": "write", "run_tag": "r", "profile": profile,
              "out_dir": out_dir, "n_per_set": 2, "seed": 0,
              "config": types.SimpleNamespace(threads=1, eval_max_new_tokens=8),
              "json": json, "display": lambda *a: None, "print": lambda *a: None}
        exec(src, ns)
        assert ("note" in ns["comparison"]) is (profile == "smoke"), ns["comparison"]
        if profile == "smoke":
            assert "smoke" in ns["comparison"]["note"] and "grpo_beats_sft" in ns["comparison"]["note"]


# --- 4. meta.json records the embedder a notebook used --------------------------------------------------------

def test_notebook_45_records_the_embedder_it_used():
    """In smoke notebook 45 runs the hash embedder whatever ``embedder`` says, but its meta.json recorded the
    parameter (``"embedder": "minilm"``)."""
    path = ROOT / "notebooks" / "45_consolidation.ipynb"
    code = "\n".join(_src(c) for c in _cells(path) if c["cell_type"] == "code")
    configs = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "MAGSConfig"]
    used = [ast.unparse(k.value) for c in configs for k in c.keywords if k.arg == "embedder"]
    meta = [n for n in _calls(code, "write_meta")]
    recorded = [ast.unparse(v) for call in meta for k in call.keywords if k.arg == "params" and isinstance(k.value, ast.Dict)
                for key, v in zip(k.value.keys, k.value.values) if isinstance(key, ast.Constant) and key.value == "embedder"]
    assert used and recorded and used == recorded, (used, recorded)


# --- the notebooks stay committed clean, with the same cell ids -----------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_json_is_clean(path):
    for c in _cells(path):
        assert c.get("id"), "every cell keeps an id"
        if c["cell_type"] == "code":
            assert c.get("outputs") == [] and c.get("execution_count") is None, (path.name, c.get("id"))


# --- 5. the resume hash covers the models and files a notebook reads from outside its run -----------------------

_TAG_PARAMS = {"25_training_objectives": "warm_start_tag", "30_export_gguf": "trained_tag",
               "50_game_evaluation": "trained_tag", "55_textworld": "trained_tag", "60_ablations": "trained_tag"}


@pytest.mark.parametrize("name", sorted(_TAG_PARAMS))
def test_models_read_from_another_run_are_inputs_of_the_hash(name, tmp_path):
    """A notebook pointed at another run's models (``-p trained_tag=other``) was keyed on nothing of them (notebook
    30's inputs named ``{run_tag}``; 25, 50, 55 and 60 declared none, relying on ``needs``, which covers this run's
    models only): retraining the other run left the finished notebook skipped with the old models' figures."""
    path = ROOT / "notebooks" / f"{name}.ipynb"
    info = pipeline.NotebookInfo(path=path, nn=name[:2], name=name)
    param = _TAG_PARAMS[name]
    assert param in pipeline.inspect_parameters(path), f"{name}: no {param} parameter"
    meta = tmp_path / "models" / "write" / "other" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text("{}")

    def h(**p):
        return pipeline.input_hash(info, {"profile": "smoke", "run_tag": "run", "seed": 0, **p}, root=tmp_path,
                                   library="lib", environment="env")

    before, own = h(**{param: "other"}), h()
    meta.write_text('{"retrained": true}')
    assert h(**{param: "other"}) != before, f"{name}: the other run's models are not in its hash"
    assert h() == own  # the run's own models (covered by its needs) are another folder


def test_notebook_50_hashes_the_scenario_files_it_plays(tmp_path):
    """The example scenarios of ``../shared/scenarios`` (played outside the smoke profile) were no input: an edited
    scenario file left notebook 50 skipped with the old scenario's scores."""
    from mags_lib.game.scenario import DEFAULT_SCENARIO_DIR

    path = ROOT / "notebooks" / "50_game_evaluation.ipynb"
    info = pipeline.NotebookInfo(path=path, nn="50", name=path.stem)
    root = tmp_path / "project"
    root.mkdir()
    scen = (root / DEFAULT_SCENARIO_DIR).resolve()
    scen.mkdir(parents=True)
    (scen / "persona.json").write_text("{}")

    def h():
        return pipeline.input_hash(info, {"profile": "default", "run_tag": "run", "seed": 0}, root=root,
                                   library="lib", environment="env")

    before = h()
    (scen / "persona.json").write_text('{"edited": true}')
    assert h() != before


def test_notebook_55_plays_the_trained_models_of_its_own_run():
    """``mags_trained`` / ``rag_trained`` got no run tag, so MAGSConfig's default (``default``) was played in every run
    (``--run-tag try2`` trained try2's models, notebook 55 played default's, or skipped them as missing)."""
    path = ROOT / "notebooks" / "55_textworld.ipynb"
    assert "trained_tag" in pipeline.inspect_parameters(path)
    src = _cell(path, "908dd634")
    assigns = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "trained" for t in n.targets)]
    assert assigns and all(isinstance(a.value, ast.Dict) for a in assigns), "trained must always be a dict"
    first = assigns[0].value
    keys = [ast.literal_eval(k) for k in first.keys]
    assert keys == ["trained_tag"] and ast.unparse(first.values[0]) == "trained_tag or run_tag"


# --- 6. the 2026-12-08 notebook audit ---------------------------------------------------------------------------

def _nb(name: str) -> Path:
    return ROOT / "notebooks" / f"{name}.ipynb"


def _info(name: str) -> pipeline.NotebookInfo:
    return pipeline.NotebookInfo(path=_nb(name), nn=name[:2], name=name)


def _assigned(src: str, name: str) -> str:
    """The source of the value of the (first) top-level ``name = ...`` of a cell."""
    return next(ast.unparse(n.value) for n in ast.parse(src).body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in n.targets))


def _statements(src: str, first: str, last_prefix: str) -> str:
    """The cell's top-level statements from the one starting with ``first`` to the one starting with ``last_prefix``."""
    lines = src.splitlines()
    body = ast.parse(src).body
    i = next(k for k, n in enumerate(body) if lines[n.lineno - 1].startswith(first))
    j = next(k for k, n in enumerate(body) if k >= i and lines[n.lineno - 1].startswith(last_prefix))
    return "\n".join(lines[body[i].lineno - 1:body[j].end_lineno])


def _agg():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def test_notebook_70_reads_the_trained_models_of_its_own_run():
    """With ``models=trained`` notebook 70 passed ``{"models": "trained"}`` alone: MAGSConfig's trained_tag stayed
    ``default``, so a run tagged ``try2`` measured the default run's models."""
    path = _nb("70_locomo_benchmark")
    assert "trained_tag" in pipeline.inspect_parameters(path)
    expr = _assigned(_cell(path, "385334b6"), "overrides")
    ns = {"seed": 0, "embedder": "minilm", "n_threads": 0, "extra_embedders": "", "mags_writes": "episodes",
          "run_tag": "try2"}
    assert eval(expr, {**ns, "models": "trained", "trained_tag": ""})["mags_kwargs"] == {"models": "trained",
                                                                                       "trained_tag": "try2"}
    assert eval(expr, {**ns, "models": "trained", "trained_tag": "other"})["mags_kwargs"]["trained_tag"] == "other"
    # the base models need no tag: the cached units of base runs keep their keys
    assert eval(expr, {**ns, "models": "base", "trained_tag": ""})["mags_kwargs"] == {"models": "base"}


@pytest.mark.parametrize("name,roles", [("70_locomo_benchmark", ("write",)), ("45_consolidation", ("ask", "answer"))])
def test_the_trained_models_a_run_reads_are_inputs_of_its_hash(name, roles, tmp_path):
    """45 declared ``models/answer/default/`` whatever run it was (and not the ask model its open-book questions
    run); 70 declared every run's GGUF manifest and none of the tag it reads."""
    info = _info(name)

    def h(**p):
        return pipeline.input_hash(info, {"profile": "default", "run_tag": "run", "seed": 0, "models": "trained", **p},
                                   root=tmp_path, library="lib", environment="env")

    for role in roles:
        meta = tmp_path / "models" / role / "other" / "meta.json"
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text("{}")
        before, own = h(trained_tag="other"), h()
        meta.write_text('{"retrained": true}')
        assert h(trained_tag="other") != before, (name, role)
        assert h() == own, (name, role)  # another run's models are no input of this run's
    if name == "45_consolidation":  # and this run's own models are, when trained_tag is left empty
        own_meta = tmp_path / "models" / "ask" / "run" / "meta.json"
        own_meta.parent.mkdir(parents=True)
        before = h()
        own_meta.write_text("{}")
        assert h() != before


def test_notebook_45_reads_its_runs_models_after_they_are_trained():
    """Notebook 45 with ``models=trained`` built its agent on run tag ``default`` whatever the run, and needed no
    notebook, so a parallel run (``--jobs 2``) could consolidate on models notebook 20 was still writing."""
    path = _nb("45_consolidation")
    assert "trained_tag" in pipeline.inspect_parameters(path)
    src = _cell(path, "c45-02")
    calls = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "MAGSConfig"]
    assert calls and all({k.arg: ast.unparse(k.value) for k in c.keywords}.get("trained_tag") == "trained_tag or run_tag"
                         for c in calls)
    nbs = pipeline.discover_notebooks(ROOT / "notebooks")
    assert "20_train_ask_write" in pipeline.notebook_needs(_info("45_consolidation"), nbs)
    # a base-model run still runs alone: nothing it needs has to exist
    assert pipeline.declared_inputs(_info("45_consolidation"), {"run_tag": "x"})[0] == "models/ask/x/meta.json"


def test_notebook_45_takes_its_facts_by_the_checked_path():
    """``scenario_facts(...)[:n_facts]`` cut a request beyond what the scenarios hold without a word, and meta.json
    recorded the requested count."""
    from mags_lib.bench import consolidation as bench

    src = _cell(_nb("45_consolidation"), "c45-02")
    expr = _assigned(src, "facts")
    assert "[:" not in expr
    held = len(bench.scenario_facts("default", seed=0, n_scenarios=60))
    assert len(eval(expr, {"bench": bench, "n_facts_run": 3, "seed": 0})) == 3
    with pytest.raises(ValueError, match="hold"):
        eval(expr, {"bench": bench, "n_facts_run": held + 1, "seed": 0})


def _before_after(acc: float) -> dict:
    return {"closed_book": {"accuracy": acc}, "open_book": {"accuracy": acc, "memory_tokens_mean": 12.0},
            "answer_role": {"accuracy": acc}, "perplexity": 20.0, "graph": {"n_facts": 4, "mean_strength": 0.5}}


def test_notebook_45_draws_no_after_bars_when_nothing_was_consolidated(tmp_path):
    """A skipped consolidation (no fact passed the selection) was drawn as 'after' bars of accuracy 0, and the table
    printed a literal 'closed-book memory tokens per query: 0' that nothing measured."""
    plt = _agg()
    path = _nb("45_consolidation")
    assert "memory tokens per query: 0" not in _cell(path, "c45-05")
    for after, n_bars in (({}, 1), (_before_after(0.5), 2)):
        ns = {"plt": plt, "b": _before_after(0.25), "a": after, "ch": {"n": 0, "rows": []}, "out_dir": tmp_path}
        plt.show = lambda *a, **k: None
        exec(_cell(path, "c45-08"), ns)
        bars = ns["ax"][0].containers
        assert len(bars) == n_bars, after
        if not after:
            assert [p.get_height() for p in bars[0]] == [0.25, 0.25, 0.25]
            assert any("not run" in t.get_text() for t in ns["ax"][0].texts)
        plt.close("all")
    printed = []
    ns = {"metrics": {"before": _before_after(0.25)}, "pd": __import__("pandas"), "display": lambda *a: None,
          "c": {"skipped": "no fact passes the selection"}, "print": lambda *a: printed.append(" ".join(map(str, a)))}
    exec(_cell(path, "c45-05"), ns)
    assert ns["table"]["after"].isna().all() and any("skipped" in p for p in printed)


@pytest.mark.parametrize("name,cell", [("50_game_evaluation", "c1e2b31e"), ("60_ablations", "df51b642")])
def test_game_notebooks_give_their_agents_the_run_seed(name, cell):
    """``profile_base`` without ``seed``: every agent kept MAGSConfig.seed 0 while meta.json recorded the run's."""
    calls = _calls(_cell(_nb(name), cell), "profile_base")
    assert calls and all({k.arg: ast.unparse(k.value) for k in c.keywords}.get("seed") == "seed" for c in calls)


def test_notebook_50_compares_graph_trained_with_no_memory_on_the_same_reader(tmp_path):
    """``graph_trained - none`` put the trained reader against the base one (DESIGN.md: systems differ by memory
    only); the no-memory row of graph_trained is none_trained."""
    import pandas as pd

    from mags_lib.game import SYSTEMS

    assert SYSTEMS["none_trained"] == {"memory": "none", "models": "trained"}
    assert "none_trained" in pipeline.inspect_parameters(_nb("50_game_evaluation"))["systems"]["default"]
    pairs = []
    game = types.SimpleNamespace(difference_table=lambda asks, a, b, **k: pairs.append((a, b)) or pd.DataFrame({"a": [a]}))
    systems = ["none", "rag", "graph_base", "graph_trained", "none_trained", "rag_trained"]
    ns = {"results": types.SimpleNamespace(asks=pd.DataFrame({"system": systems})), "game": game, "pd": pd,
          "n_boot": 10, "seed": 0, "out_dir": tmp_path, "display": lambda *a: None}
    exec(_cell(_nb("50_game_evaluation"), "36bc987c"), ns)
    assert ("graph_trained", "none_trained") in pairs and ("graph_trained", "none") not in pairs
    assert ("graph_base", "none") in pairs and ("graph_trained", "rag_trained") in pairs


def test_notebook_50_saves_each_curve_in_its_own_figure(tmp_path):
    """One two-panel figure was saved as both update_by_changes.png and retention_by_distance.png."""
    import pandas as pd

    from mags_lib.game import plot_curve

    plt = _agg()
    made = []
    real = plt.subplots

    def subplots(*a, **k):
        fig, ax = real(*a, **k)
        made.append(fig)
        return fig, ax

    rows = lambda col, xs: pd.DataFrame({"system": "rag", col: xs, "accuracy": 0.5, "lo": 0.4, "hi": 0.6})  # noqa: E731
    game = types.SimpleNamespace(by_changes=lambda *a, **k: rows("n_changes", [1, 2]),
                                 by_distance=lambda *a, **k: rows("distance_bin", ["0-4", "5-8"]), plot_curve=plot_curve)
    plt.subplots, plt.show = subplots, (lambda *a, **k: None)
    try:
        exec(_cell(_nb("50_game_evaluation"), "0087dec4"),
             {"game": game, "plt": plt, "results": types.SimpleNamespace(asks=None), "n_boot": 10, "seed": 0,
              "out_dir": tmp_path})
    finally:
        plt.subplots = real
    assert len(made) == 2 and all(len(f.axes) == 1 for f in made)
    assert [f.axes[0].get_title() for f in made] == ["update accuracy", "retention accuracy"]
    a, b = (tmp_path / "update_by_changes.png").read_bytes(), (tmp_path / "retention_by_distance.png").read_bytes()
    assert a != b
    plt.close("all")


def _episodes() -> list[dict]:
    eps = []
    for kind, agents, n in (("treasure_hunter", ("none", "perfect", "mags_trained"), 2), ("cooking", ("none", "perfect"), 3)):
        for agent in agents:
            for i in range(n):
                eps.append({"kind": kind, "agent": agent, "won": i % 2 == 0, "steps": 5 + i, "n_asks": 1,
                            "commands": [], "answers": {}})
    return eps


def test_notebook_55_labels_every_agent_bar_and_counts_each_rows_episodes(tmp_path):
    """The x ticks were set inside the loop over kinds (the last kind's positions and agents: the first kind's bars
    unlabelled), and every agent record took n_games (the state study's games) as its n."""
    import pandas as pd

    from mags_lib import results
    from mags_lib import textworld as real_t

    plt = _agg()
    plt.show = lambda *a, **k: None
    path = _nb("55_textworld")
    eps = _episodes()
    T = types.SimpleNamespace(GameSpec=lambda **k: types.SimpleNamespace(**k), episode_table=real_t.episode_table,
                              agent_study=lambda specs, *a, **k: ([e for e in eps if e["kind"] == specs[0].kind], {}),
                              ARIGRAPH_ANCHOR=real_t.ARIGRAPH_ANCHOR)
    ns = {"skip": None, "T": T, "plt": plt, "pd": pd, "display": lambda *a: None, "print": lambda *a: None,
          "agent_games": 2, "agent_rooms": 0, "room_sizes": [3], "agent_quest": 3, "seed": 0, "agent_names": [],
          "agent_cfg": None, "n_jobs": 1, "base": {}, "trained": {}, "profile": "default", "n_episodes": 3,
          "out_dir": tmp_path}
    exec(_cell(path, "4182d8e2"), ns)
    ax = ns["ax"]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["none", "perfect", "mags_trained"]
    ticks = list(ax.get_xticks())
    assert len(ax.patches) == 5  # 3 treasure-hunter agents, 2 cooking ones: each bar within its agent's tick group
    for bar in ax.patches:
        centre = bar.get_x() + bar.get_width() / 2
        assert min(abs(centre - t) for t in ticks) < 0.35, centre
    plt.close("all")
    # the metrics cell: each agent row keeps its own episodes as n
    acc = pd.DataFrame({"system": ["rag", "rag"], "kind": ["recall", "overall"], "accuracy": [0.5, 0.5],
                        "ci_low": [0.4, 0.4], "ci_high": [0.6, 0.6]})
    written = {}
    ns.update({"acc": acc, "q_specs": [1] * 30, "records": [{}] * 4, "qdf": pd.DataFrame({"system": ["rag"] * 4}),
               "diffs": pd.DataFrame(columns=["a", "b", "kind", "difference", "lo", "hi"]),
               "cost": pd.DataFrame({"s_per_game": [1.0]}, index=["rag"]), "skipped_systems": {}, "skipped_agents": {},
               "write_metrics": lambda out, m: written.update(m), "json": json, "time": __import__("time"),
               "t_start": 0.0, "repro": types.SimpleNamespace(write_meta=lambda *a, **k: None), "run_tag": "r",
               "n_games": 30, "n_steps": 14, "per_round": 3, "system_names": [], "agent_max_steps": 30,
               "explore_first": 15, "answer_tag": "", "memory_token_budget": 256, "trained": {"trained_tag": "r"}})
    exec(_cell(path, "0f928e54"), ns)
    assert written["agent"]["treasure_hunter/none"]["episodes"] == 2
    assert written["agent"]["cooking/perfect"]["episodes"] == 3
    recs = {r["name"]: r for r in results.extract_records("55_textworld", written)}
    assert recs["cooking/none success"]["n"] == 3 and recs["treasure_hunter/mags_trained steps"]["n"] == 2


def test_notebook_55_says_which_trained_models_it_reads():
    text = _src(_cells(_nb("55_textworld"))[0])
    assert "models/<role>/default/" not in text and "trained_tag" in text


def test_notebook_30_skips_the_switch_without_an_adapter(tmp_path):
    """``-p variants=q8_0`` (no lora): time_switch raised 'needs at least one GGUF adapter'."""
    import pandas as pd

    path = _nb("30_export_gguf")
    printed = []

    def never(*a, **k):
        raise AssertionError("time_switch called without an adapter")

    src = types.SimpleNamespace(role="ask", adapter=tmp_path / "a")
    report = types.SimpleNamespace(files_of=lambda s, variants: {v: tmp_path / f"{v}.gguf" for v in variants
                                                                  if v != "lora"})
    ns = {"srcs": {"ask": src}, "report": report, "variant_list": ["q8_0"], "profile": "default", "time_switch": never,
          "n_threads": 1, "out_dir": tmp_path, "pd": pd, "display": lambda *a: None,
          "print": lambda *a: printed.append(" ".join(map(str, a)))}
    exec(_cell(path, "9e12bc91"), ns)
    assert len(ns["switch_df"]) == 0 and len([p for p in printed if "skipped" in p]) == 1


def _nb30_metrics(tmp_path, *, profile="default", models=None, switch=True, variants=("f16", "q8_0", "q4_k_m")):
    import pandas as pd

    rows = []
    for role, metric in (("ask", "op_f1"), ("write", "op_f1"), ("answer", "accuracy")):
        for label, top1, q in (("transformers", 1.0, 0.70), ("f16", 0.999, 0.70), ("q8_0", 0.99, 0.69),
                               ("q4_k_m", 0.97, 0.66 if role == "write" else 0.69)):
            if label == "transformers" or label in variants:
                rows.append({"role": role, "label": label, "top1_agreement": top1, metric: q,
                             **({"adherence": 1.0} if role != "answer" else {})})
    written = {}
    ns = {"parity_df": pd.DataFrame(rows), "srcs": {r: types.SimpleNamespace(stand_in=False) for r in ("ask", "write", "answer")},
          "files_df": pd.DataFrame({"role": ["ask"]}), "manifests": {r: {"export_seconds": 15.0} for r in ("ask", "write", "answer")},
          "switch_df": pd.DataFrame({"backend": ["llamacpp"], "what": ["switch adapter (one context)"], "p50_s": [0.0001],
                                     "n": [3]}) if switch else pd.DataFrame(columns=["backend", "what", "p50_s", "n"]),
          "memory_df": pd.DataFrame(), "latency": {"observe_p50_s": 0.65, "observe_p95_s": 0.8, "ask_p50_s": 1.2,
                                                   "ask_p95_s": 1.5},
          "models": models if models is not None else {"models": "trained", "trained_tag": "t"}, "profile": profile,
          "write_metrics": lambda out, m: written.update(m), "repro": types.SimpleNamespace(write_meta=lambda *a, **k: None),
          "pd": pd, "json": json, "time": __import__("time"), "t_start": 0.0, "display": lambda *a: None,
          "print": lambda *a: None, "out_dir": tmp_path, "run_tag": "r", "tag": "t", "role_list": [], "variant_list": [],
          "n_prompts": 2, "n_new": 16, "imatrix_rows": 0, "n_threads": 1, "n_jobs": 1, "force": False, "seed": 0}
    from mags_lib.export.parity import parity_summary

    ns["parity_summary"] = parity_summary
    exec(_cell(_nb("30_export_gguf"), "8f84e61c"), ns)
    return written


def test_notebook_30_compares_every_target_it_lists(tmp_path):
    """metrics["targets"] listed the Q4_K_M drop and the ask / observe latencies, which ``measured`` never held."""
    m = _nb30_metrics(tmp_path)
    assert set(m["measured"]) == set(m["targets"]) == set(m["met"])
    assert m["measured"]["q4_k_m_points_of_f16_max"] == pytest.approx(0.04)  # write op F1 0.70 -> 0.66
    assert m["met"] == {"f16_top1_min": True, "q8_0_top1_min": True, "q4_k_m_points_of_f16_max": False,
                        "export_seconds_max": True, "switch_s_max": True, "ask_p50_s_max": False,
                        "observe_p50_s_max": True}
    # nothing to compare: None with the reason, never a made-up verdict
    m = _nb30_metrics(tmp_path, switch=False, variants=("q8_0",), profile="smoke")
    assert m["measured"]["switch_s_max"] is None and m["met"]["switch_s_max"] is None
    assert m["measured"]["q4_k_m_points_of_f16_max"] is None and m["met"]["q4_k_m_points_of_f16_max"] is None
    assert m["met"]["ask_p50_s_max"] is None and "smoke" in m["not_compared"]["ask_p50_s_max"]
    m = _nb30_metrics(tmp_path, models={"ask_model": "x.gguf"})
    assert m["met"]["observe_p50_s_max"] is None and "trained" in m["not_compared"]["observe_p50_s_max"]


def test_notebook_30_types_no_unmeasured_numbers():
    text = _src(next(c for c in _cells(_nb("30_export_gguf")) if c.get("id") == "9bfff5da"))
    assert "0.85 s" not in text and "0.66 s" not in text


def test_notebook_20_declares_the_run_it_continues(tmp_path):
    """``sft``'s ``init_from`` reads ``models/<role>/<init_from>/``, which no input named: retraining that run left
    the variant skipped with the old warm start. ``-p init_from=...`` is the declared form."""
    import dataclasses

    info = _info("20_train_ask_write")
    assert "init_from" in pipeline.inspect_parameters(info.path)
    meta = tmp_path / "models" / "ask" / "prev" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text("{}")

    def h(**p):
        return pipeline.input_hash(info, {"profile": "smoke", "run_tag": "run", "seed": 0, "role": "ask", **p},
                                   root=tmp_path, library="lib", environment="env")

    before, plain = h(init_from="prev"), h()
    meta.write_text('{"retrained": true}')
    assert h(init_from="prev") != before and h() == plain

    @dataclasses.dataclass
    class Sft:
        max_steps: int = 1
        init_from: str | None = None

    @dataclasses.dataclass
    class Config:
        sft: Sft

    code = _statements(_cell(info.path, "96b2c522"), "sft_fields = ", "if sft_fields:")

    def run(sft, init_from):
        ns = {"json": json, "dataclasses": dataclasses, "config": Config(Sft()), "sft": sft, "init_from": init_from,
              "print": lambda *a: None}
        exec(code, ns)
        return ns["config"].sft

    assert run("", "prev") == Sft(init_from="prev")
    assert run('{"max_steps": 5, "init_from": "prev"}', "") == Sft(max_steps=5, init_from="prev")  # README's form
    assert run('{"init_from": "prev"}', "prev") == Sft(init_from="prev")
    with pytest.raises(ValueError, match="differ"):
        run('{"init_from": "a"}', "b")
