"""The papermill runner: parameter validation, selection, failures, resume."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from mags_lib import pipeline
from mags_lib.pipeline import ParameterError, PipelineError, parse_value, validate_parameters

NB_DIR = Path(__file__).parent / "fixtures" / "pipeline"  # 00_first (greeting: str, ratio: float), 10_second (n_items: int,
# fail: bool, mode: str "fast | slow"); both declare profile/run_tag/seed.
BASE = {"profile": "smoke", "run_tag": "t", "seed": 0}


@pytest.fixture(scope="module")
def specs():
    return {nb.name: pipeline.inspect_parameters(nb.path) for nb in pipeline.discover_notebooks(NB_DIR)}


def run_cli(tmp_path, *args):
    """Run the CLI on the fixture notebooks into tmp_path/results; return (rc, state or None)."""
    root = tmp_path / "results"
    rc = pipeline.main(["--notebooks-dir", str(NB_DIR), "--results-root", str(root), "--no-progress",
                        *args])
    state_file = root / "smoke" / "pipeline.json"
    return rc, (json.loads(state_file.read_text()) if state_file.exists() else None)


# --- validation: a table of cases --------------------------------------------------------------

VALID = [
    # (extra parameters, notebook, name, expected typed value)
    ({"n_items": "5"}, "10_second", "n_items", 5),  # int parsed from the command line
    ({"n_items": "-2"}, "10_second", "n_items", -2),  # negative int
    ({"ratio": "0.25"}, "00_first", "ratio", 0.25),  # float
    ({"ratio": "1e-3"}, "00_first", "ratio", 1e-3),  # float in exponent notation
    ({"ratio": 2}, "00_first", "ratio", 2.0),  # typed int from the Python API widens to float
    ({"fail": "yes"}, "10_second", "fail", True),  # bool spellings
    ({"fail": "False"}, "10_second", "fail", False),
    ({"mode": "slow"}, "10_second", "mode", "slow"),  # one of the choices in the help comment
    ({"greeting": "a=b, c"}, "00_first", "greeting", "a=b, c"),  # str kept verbatim
    ({"profile": "full"}, "00_first", "profile", "full"),  # profile choice
]


@pytest.mark.parametrize("extra,nb,name,expected", VALID)
def test_valid_parameters_are_typed_and_routed(specs, extra, nb, name, expected):
    per_nb = validate_parameters(specs, {**BASE, **extra})
    assert per_nb[nb][name] == expected and type(per_nb[nb][name]) is type(expected)
    other = "00_first" if nb == "10_second" else "10_second"
    if name not in specs[other]:
        assert name not in per_nb[other]  # passed only to the notebooks that declare it
    assert all(per_nb[n]["seed"] == 0 and per_nb[n]["run_tag"] == "t" for n in per_nb)


INVALID = [
    # (extra parameters, fragments the message must contain)
    ({"nitems": "5"}, ["unknown parameter 'nitems'", "did you mean 'n_items'", "n_items (int) = 3"]),
    ({"zzz": "1"}, ["unknown parameter 'zzz'", "no selected notebook declares it", "valid parameters"]),
    ({"n_items": "five"}, ["'n_items' of 10_second is declared int", "'five'"]),
    ({"n_items": "1.5"}, ["declared int"]),  # no silent truncation
    ({"n_items": True}, ["declared int", "bool"]),  # a bool is not an int
    ({"ratio": "abc"}, ["'ratio' of 00_first is declared float"]),
    ({"fail": "maybe"}, ["declared bool", "true/false"]),
    ({"mode": "medium"}, ["must be one of fast | slow", "'medium'"]),
    ({"profile": "huge"}, ["must be one of smoke | default | full"]),
    ({"nitems": "5", "ratio": "x"}, ["unknown parameter 'nitems'", "'ratio' of 00_first"]),  # all at once
]


@pytest.mark.parametrize("extra,fragments", INVALID)
def test_invalid_parameters_are_rejected_with_the_valid_list(specs, extra, fragments):
    with pytest.raises(ParameterError) as err:
        validate_parameters(specs, {**BASE, **extra})
    msg = str(err.value)
    for fragment in fragments:
        assert fragment in msg, msg
    assert "greeting (str)" in msg and "fail (bool)" in msg  # the valid parameters are listed


def test_notebook_without_required_parameters_is_rejected(specs):
    broken = {k: dict(v) for k, v in specs.items()}
    del broken["00_first"]["seed"]
    with pytest.raises(ParameterError, match="00_first does not declare seed"):
        validate_parameters(broken, BASE)


PARSE = [
    ("3", "int", 3),
    ("none", "Optional[int]", None),  # Optional accepts none/null
    ("7", "int | None", 7),
    ("[1, 2]", "list[int]", [1, 2]),
    ("{'a': 1}", "dict", {"a": 1}),
    ("on", "bool", True),
    ("(1, 'x')", "tuple", (1, "x")),
]


@pytest.mark.parametrize("raw,type_name,expected", PARSE)
def test_parse_value(raw, type_name, expected):
    assert parse_value(raw, type_name) == expected


@pytest.mark.parametrize("raw,type_name", [("3", "list"), ("[1", "list[int]"), ("x", "dict"),
                                           ("none", "int")])
def test_parse_value_rejects(raw, type_name):
    with pytest.raises(ValueError, match="expected"):
        parse_value(raw, type_name)


def test_inspect_reads_types_defaults_and_choices(specs):
    s = specs["10_second"]
    assert s["n_items"]["type"] == "int" and s["n_items"]["default"] == "3"
    assert s["mode"]["choices"] == ["fast", "slow"]
    assert s["profile"]["choices"] == ["smoke", "default", "full"]
    assert s["n_items"]["choices"] is None  # "how many items to count" is not a choice list


def test_notebook_without_parameters_cell_is_an_error(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(nb, tmp_path / "00_x.ipynb")
    with pytest.raises(PipelineError, match="no cell tagged 'parameters'"):
        pipeline.inspect_parameters(tmp_path / "00_x.ipynb")


# --- selection -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kw,expected", [
    ({}, ["00_first", "10_second"]),
    ({"only": ["10"]}, ["10_second"]),
    ({"only": ["10_second", "00"]}, ["00_first", "10_second"]),  # sequence order, not argument order
    ({"start": "10"}, ["10_second"]),
    ({"stop": "05"}, ["00_first"]),
    ({"start": "00_first", "stop": "00_first"}, ["00_first"]),
])
def test_select_notebooks(kw, expected):
    nbs = pipeline.discover_notebooks(NB_DIR)
    assert [nb.name for nb in pipeline.select_notebooks(nbs, **kw)] == expected


@pytest.mark.parametrize("kw,fragment", [
    ({"only": ["30"]}, "matches no notebook"),
    ({"start": "50"}, "no notebook numbered 50..99"),
    ({"start": "first"}, "neither a two-digit number nor a notebook name"),
    ({"only": ["10"], "start": "00"}, "either --only or --from/--to"),
])
def test_select_notebooks_errors(kw, fragment):
    with pytest.raises(PipelineError, match=fragment):
        pipeline.select_notebooks(pipeline.discover_notebooks(NB_DIR), **kw)


# --- the command line -------------------------------------------------------------------------


def test_cli_unknown_parameter_runs_nothing(tmp_path, capsys):
    rc, state = run_cli(tmp_path, "--profile", "smoke", "-p", "n_itemz=4")
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown parameter 'n_itemz' (did you mean 'n_items'?)" in err
    assert "n_items (int) = 3  # how many items to count  [10]" in err
    assert state is None and not (tmp_path / "results" / "smoke").exists()  # nothing executed


@pytest.mark.parametrize("args,fragment", [
    (["-p", "novalue"], "-p expects key=value"),
    (["-p", "seed=3"], "pass seed with --seed"),
    (["--seed", "x"], "--seed: expected an integer"),
    (["--run-tag", "../up"], "must be a folder name"),
    (["--run-tag", "bench"], "is reserved"),
])
def test_cli_usage_errors(tmp_path, capsys, args, fragment):
    rc, _ = run_cli(tmp_path, "--profile", "smoke", *args)
    assert rc == 2 and fragment in capsys.readouterr().err


def test_smoke_and_real_runs_never_share_a_run_tag(tmp_path, capsys):
    run = tmp_path / "results" / "mine"
    run.mkdir(parents=True)
    (run / "pipeline.json").write_text(json.dumps({"profile": "smoke", "notebooks": {}}))
    rc, _ = run_cli(tmp_path, "--profile", "default", "--run-tag", "mine")
    assert rc == 2 and "holds a 'smoke' run" in capsys.readouterr().err
    (run / "pipeline.json").write_text(json.dumps({"profile": "default", "notebooks": {}}))
    rc, _ = run_cli(tmp_path, "--profile", "smoke", "--run-tag", "mine")
    assert rc == 2 and "holds a 'default' run" in capsys.readouterr().err


def test_list_shows_parameters(tmp_path, capsys):
    assert run_cli(tmp_path, "--list")[0] == 0
    out = capsys.readouterr().out
    assert "00_first" in out and "mode (str) = \"fast\"  # fast | slow  [10]" in out


# --- execution (real kernels on the tiny fixture notebooks, about a second each) ---------------


def test_failing_notebook_stops_names_the_cell_and_keeps_earlier_outputs(tmp_path, capsys):
    rc, state = run_cli(tmp_path, "--profile", "smoke", "-p", "fail=true")
    err = capsys.readouterr().err
    assert rc == 1
    assert "notebook 10_second.ipynb failed in cell 3" in err
    assert "if fail:" in err  # the first line of the failing cell
    assert "ValueError: requested failure with n_items=3" in err
    run = tmp_path / "results" / "smoke"
    # the notebook that finished is kept, with its record and its own output file
    assert state["notebooks"]["00_first"]["status"] == "done"
    assert (run / "00_first" / "marker.txt").read_text() == "hello 0.5 0 smoke"
    rec = state["notebooks"]["10_second"]
    assert rec["status"] == "failed"
    assert rec["error"] == {"cell_index": 3, "exec_count": rec["error"]["exec_count"],
                            "first_line": "if fail:", "ename": "ValueError",
                            "evalue": "requested failure with n_items=3"}
    # the executed copy keeps the outputs of the cells before the failure
    executed = nbformat.read(run / "10_second" / "10_second.ipynb", as_version=4)
    texts = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
    assert "before the failure: 3" in texts
    assert state["profile"] == "smoke" and state["run_tag"] == "smoke"


def test_resume_skips_what_is_done_and_reruns_what_changed(tmp_path, capsys):
    def started(state):
        return {n: r["started_at"] + str(r["wall_time_s"]) for n, r in state["notebooks"].items()}

    env_before = dict(os.environ)
    rc, s1 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items=4")
    assert dict(os.environ) == env_before  # the kernels' environment does not leak into ours
    assert rc == 0 and [r["status"] for r in s1["notebooks"].values()] == ["done", "done"]
    for rec in s1["notebooks"].values():
        assert rec["wall_time_s"] > 0 and rec["peak_mem_mb"] > 10  # the kernel was sampled
    assert s1["notebooks"]["10_second"]["parameters"] == {**BASE, "run_tag": "smoke", "n_items": 4}
    assert "n_items" not in s1["notebooks"]["00_first"]["parameters"]

    time.sleep(1.1)  # started_at has one-second resolution
    rc, s2 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items=4")
    assert rc == 0 and started(s2) == started(s1)  # same parameters and inputs: both skipped
    assert capsys.readouterr().out.count("[skip]") == 2

    # a different value for 10 only re-runs 10; a change upstream (00) re-runs 00 and 10
    rc, s3 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items=5")
    assert rc == 0 and started(s3)["00_first"] == started(s1)["00_first"]
    assert started(s3)["10_second"] != started(s1)["10_second"]
    assert (tmp_path / "results/smoke/10_second/count.txt").read_text() == "5"
    rc, s4 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items=5", "-p", "greeting=hi")
    assert rc == 0 and all(started(s4)[n] != started(s3)[n] for n in started(s3))

    # --force re-runs the selection even when nothing changed
    rc, s5 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items=5", "--force", "--only", "10")
    assert rc == 0 and started(s5)["00_first"] == started(s4)["00_first"]
    assert started(s5)["10_second"] != started(s4)["10_second"]


# --- input hash ------------------------------------------------------------------------------


def test_input_hash_ignores_outputs_but_not_sources_params_or_declared_inputs(tmp_path):
    shutil.copy(NB_DIR / "00_first.ipynb", tmp_path / "00_first.ipynb")
    info = pipeline.discover_notebooks(tmp_path)[0]
    params = dict(BASE)
    h0 = pipeline.input_hash(info, params, root=tmp_path)

    nb = nbformat.read(info.path, as_version=4)
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x")]
    nb.cells[2].execution_count = 7
    nbformat.write(nb, info.path)
    assert pipeline.input_hash(info, params, root=tmp_path) == h0  # outputs do not count

    assert pipeline.input_hash(info, {**params, "seed": 1}, root=tmp_path) != h0
    assert pipeline.input_hash(info, params, upstream=["abc"], root=tmp_path) != h0

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("one")
    nb.metadata["mags"] = {"inputs": ["data/*.txt"]}
    nbformat.write(nb, info.path)
    h1 = pipeline.input_hash(info, params, root=tmp_path)
    assert h1 != h0  # declaring inputs changes the hash
    (tmp_path / "data" / "in.txt").write_text("two")
    assert pipeline.input_hash(info, params, root=tmp_path) != h1  # and so does their content

    nb.cells[2].source += "\n# edited"
    nbformat.write(nb, info.path)
    assert pipeline.input_hash(info, params, root=tmp_path) != h1


def test_a_dying_kernel_is_reported_with_its_cell(tmp_path, capsys):
    # e.g. a notebook killed for memory, or a crash in native code: no Python traceback at all
    shutil.copy(NB_DIR / "00_first.ipynb", tmp_path / "00_first.ipynb")
    nb = nbformat.read(tmp_path / "00_first.ipynb", as_version=4)
    nb.cells[3].source = "import os\nos._exit(3)"
    nbformat.write(nb, tmp_path / "05_crash.ipynb")
    rc = pipeline.main(["--profile", "smoke", "--notebooks-dir", str(tmp_path), "--no-progress",
                        "--results-root", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "05_crash.ipynb could not be executed while running cell 3" in err and "import os" in err
    state = json.loads((tmp_path / "results" / "smoke" / "pipeline.json").read_text())
    assert state["notebooks"]["00_first"]["status"] == "done"
    assert state["notebooks"]["05_crash"]["status"] == "failed"
    assert state["notebooks"]["05_crash"]["error"]["cell_index"] == 3
