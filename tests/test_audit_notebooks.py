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
