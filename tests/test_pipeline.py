"""The papermill runner: parameter validation, selection, failures, resume."""

from __future__ import annotations

import io
import json
import os
import platform
import re
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


def test_a_parameter_papermill_cannot_read_is_an_error_not_a_missing_parameter(tmp_path):
    """papermill skips a line holding two '=' (one in the help) with a log line only; the
    parameter would then be unknown to ``-p`` and silently keep its default inside the notebook."""
    cell = nbformat.v4.new_code_cell('n: int = 3  # how many\nroles: str = ""  # with models=trained, the roles kept')
    cell.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "00_x.ipynb")
    with pytest.raises(PipelineError, match=r"cannot read parameter\(s\) 'roles' \(line 2"):
        pipeline.inspect_parameters(tmp_path / "00_x.ipynb")
    cell.source = 'n: int = 3  # how many\nroles: str = ""  # with trained models, the roles kept'
    nbformat.write(nb, tmp_path / "00_x.ipynb")
    assert set(pipeline.inspect_parameters(tmp_path / "00_x.ipynb")) == {"n", "roles"}


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
    (["-p", "novalue"], "-p expects name=value or name value"),
    (["-p", "a=1", "b"], "-p expects name=value or name value"),  # neither form: not guessed
    (["-p", "n_items=1", "-p", "n_items", "2"], "'n_items' is given twice"),
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
        assert rec["runner"] == {"pid": os.getpid(), "host": platform.node()}  # a report can tell it died
    assert s1["notebooks"]["10_second"]["parameters"] == {**BASE, "run_tag": "smoke", "n_items": 4}
    assert "n_items" not in s1["notebooks"]["00_first"]["parameters"]

    err = capsys.readouterr().err
    assert "[done 2/2] 10_second" in err
    assert "code cell" not in err and "before the failure" not in err  # --no-progress: status only
    from nbformat.sign import NotebookNotary

    for name in ("00_first", "10_second"):  # executed copies are trusted: JupyterLab renders them
        executed = nbformat.read(tmp_path / f"results/smoke/{name}/{name}.ipynb", as_version=4)
        assert NotebookNotary().check_signature(executed)
    assert not NotebookNotary().check_signature(nbformat.read(NB_DIR / "10_second.ipynb", as_version=4))

    time.sleep(1.1)  # started_at has one-second resolution
    rc, s2 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items=4")
    assert rc == 0 and started(s2) == started(s1)  # same parameters and inputs: both skipped
    assert capsys.readouterr().err.count("[skip ") == 2

    # a different value for 10 only re-runs 10; a change upstream (00) re-runs 00 and 10
    rc, s3 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items", "5")  # papermill's -p form
    assert rc == 0 and started(s3)["00_first"] == started(s1)["00_first"]
    assert started(s3)["10_second"] != started(s1)["10_second"]
    assert (tmp_path / "results/smoke/10_second/count.txt").read_text() == "5"
    rc, s4 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items=5", "-p", "greeting=hi")
    assert rc == 0 and all(started(s4)[n] != started(s3)[n] for n in started(s3))

    # --force re-runs the selection even when nothing changed
    capsys.readouterr()
    rc, s5 = run_cli(tmp_path, "--profile", "smoke", "-p", "n_items=5", "--force", "--only", "10")
    assert rc == 0 and started(s5)["00_first"] == started(s4)["00_first"]
    # re-ran, as the runner says (start time to the second + wall time can repeat: it did once in CI)
    assert "[done 1/1] 10_second" in capsys.readouterr().err


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


# --- the -p forms -----------------------------------------------------------------------------


@pytest.mark.parametrize("items,expected", [
    ([["n=3"]], {"n": "3"}),  # name=value
    ([["n", "3"]], {"n": "3"}),  # papermill's name value
    ([["greeting=a=b"]], {"greeting": "a=b"}),  # only the first '=' splits
    ([["greeting", "x=y"]], {"greeting": "x=y"}),  # papermill form: the value may hold '='
    ([["delta", "-0.5"], ["m=fast"]], {"delta": "-0.5", "m": "fast"}),  # both forms together
])
def test_parse_kv_accepts_both_forms(items, expected):
    assert pipeline._parse_kv(items) == expected


def test_papermill_form_reaches_argparse_with_a_negative_value():
    args = pipeline._build_parser().parse_args(["-p", "ratio", "-0.25", "--parameters", "n_items=2"])
    assert pipeline._parse_kv(args.param) == {"ratio": "-0.25", "n_items": "2"}


# --- helpers for notebooks made on the fly ----------------------------------------------------

HEADER = ('profile: str = "default"  # smoke | default | full\n'
          'run_tag: str = "default"  # results/<run_tag>/\n'
          'seed: int = 0  # one seed for python, numpy, torch\n')


def write_nb(path: Path, params: str, *cells: str, mags: dict | None = None) -> Path:
    """A clean notebook: a markdown title, the parameters cell (HEADER + ``params``), code cells."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if mags is not None:
        nb.metadata["mags"] = mags
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.stem}"),
                nbformat.v4.new_code_cell(HEADER + params, metadata={"tags": ["parameters"]}),
                *(nbformat.v4.new_code_cell(c) for c in cells)]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture(autouse=True)
def _own_jupyter_data_dir(tmp_path, monkeypatch):
    # the runner signs executed copies with the user's notary: keep the tests' signatures out of ~
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))


# --- matrix notebooks -------------------------------------------------------------------------

ROLES_PARAMS = 'role: str = "ask"  # ask | write | answer\n'
ROLES_CELL = ('from mags_lib import repro\n'
              'out_dir = repro.run_dir(run_tag, f"20_roles/{role}")\n'
              '(out_dir / "out.txt").write_text(role)')


@pytest.fixture
def matrix_dir(tmp_path):
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_prep.ipynb", "", "x = 1")
    write_nb(nbs / "20_roles.ipynb", ROLES_PARAMS, ROLES_CELL,
             mags={"matrix": {"role": ["ask", "write", "answer"]}})
    return nbs


def run_matrix(tmp_path, nbs, *args):
    root = tmp_path / "results"
    rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(root), "--no-progress",
                        "--profile", "smoke", *args])
    state_file = root / "smoke" / "pipeline.json"
    return rc, (json.loads(state_file.read_text()) if state_file.exists() else None)


def test_matrix_runs_once_per_value_each_recorded_and_narrowed_by_p(tmp_path, matrix_dir, capsys):
    run = tmp_path / "results" / "smoke"
    # -p role write (papermill's form) narrows the matrix to one run
    rc, s1 = run_matrix(tmp_path, matrix_dir, "--only", "20", "-p", "role", "write")
    assert rc == 0 and list(s1["notebooks"]) == ["20_roles/write"]
    rec = s1["notebooks"]["20_roles/write"]
    assert rec["status"] == "done" and rec["matrix"] == {"role": "write"}
    assert rec["parameters"]["role"] == "write" and rec["wall_time_s"] > 0 and rec["peak_mem_mb"] > 10
    assert rec["output"] == "smoke/20_roles/write/20_roles.ipynb"
    assert (run / "20_roles" / "write" / "20_roles.ipynb").is_file()
    assert (run / "20_roles" / "write" / "out.txt").read_text() == "write"  # the notebook's own output
    assert not (run / "20_roles" / "ask").exists()
    capsys.readouterr()

    # the whole matrix: the two missing values run, the one already done is skipped
    rc, s2 = run_matrix(tmp_path, matrix_dir, "--only", "20")
    err = capsys.readouterr().err
    assert rc == 0 and sorted(s2["notebooks"]) == ["20_roles/answer", "20_roles/ask", "20_roles/write"]
    assert "[skip 2/3] 20_roles/write" in err and err.count("[run ") == 2
    for role in ("ask", "write", "answer"):
        assert (run / "20_roles" / role / "out.txt").read_text() == role
    hashes = {k: r["input_hash"] for k, r in s2["notebooks"].items()}
    assert len(set(hashes.values())) == 3  # each run has its own input hash
    assert s2["notebooks"]["20_roles/write"]["started_at"] == rec["started_at"]

    # a value outside the matrix is refused before anything runs
    rc, _ = run_matrix(tmp_path, matrix_dir, "--only", "20", "-p", "role=answer2")
    err = capsys.readouterr().err
    assert rc == 2 and "must be one of ask | write | answer" in err

    # a change upstream re-runs the matrix runs after it (here narrowed to one)
    nb = nbformat.read(matrix_dir / "00_prep.ipynb", as_version=4)
    nb.cells[2].source = "x = 2"
    nbformat.write(nb, matrix_dir / "00_prep.ipynb")
    rc, s3 = run_matrix(tmp_path, matrix_dir, "-p", "role=ask")
    err = capsys.readouterr().err
    assert rc == 0 and "[run 1/2] 00_prep" in err and "[run 2/2] 20_roles/ask" in err
    assert s3["notebooks"]["20_roles/ask"]["input_hash"] != hashes["20_roles/ask"]
    assert s3["notebooks"]["20_roles/write"] == s2["notebooks"]["20_roles/write"]  # untouched


def test_list_shows_the_matrix_and_the_needs(tmp_path, matrix_dir, capsys):
    assert pipeline.main(["--notebooks-dir", str(matrix_dir), "--list"]) == 0
    out = capsys.readouterr().out
    assert "20_roles  [matrix: role = ask | write | answer; one run each" in out
    assert "narrows it]  needs: 00\n" in out  # no needs declared: every earlier notebook
    assert "  00_prep  needs: nothing\n" in out


@pytest.mark.parametrize("matrix,fragment", [
    ({"rol": ["ask"]}, "names 'rol', which the parameters cell does not declare"),
    ({"role": []}, "must be a non-empty list"),
    ({"role": "ask"}, "must be a non-empty list"),
    ({"role": ["ask", "ask"]}, "lists 'ask' twice"),
    ({"role": ["ask", "read"]}, "'read' is not one of ask | write | answer"),
    ({"seed": [0, 1]}, "set by the runner"),
    (["role"], "must map a parameter name"),
])
def test_bad_matrix_is_refused_before_anything_runs(tmp_path, matrix, fragment):
    path = write_nb(tmp_path / "nbs" / "20_roles.ipynb", ROLES_PARAMS, ROLES_CELL,
                    mags={"matrix": matrix})
    with pytest.raises(PipelineError, match=re.escape(fragment)):
        pipeline.run_pipeline(profile="smoke", notebooks_dir=path.parent,
                              results_root=tmp_path / "results", progress=False)
    assert not (tmp_path / "results").exists()


def test_matrix_values_must_be_folder_names(tmp_path):
    write_nb(tmp_path / "20_x.ipynb", 'name: str = "a"  # any text\n', mags={"matrix": {"name": ["a/b"]}})
    with pytest.raises(PipelineError, match="cannot name an output folder"):
        pipeline.notebook_matrix(pipeline.discover_notebooks(tmp_path)[0])


def test_run_dir_takes_a_matrix_subfolder(tmp_path):
    from mags_lib import repro

    assert repro.run_dir("t", "20_roles/ask", root=tmp_path) == tmp_path / "t" / "20_roles" / "ask"
    for bad in ("20_roles/../x", "20_roles/", "/abs", "a\\b"):
        with pytest.raises(ValueError, match="stage must be"):
            repro.run_dir("t", bad, root=tmp_path)


# --- the library's source and parameter-named inputs are part of the input hash ----------------


def test_library_digest_follows_the_imported_modules_content_only(tmp_path):
    lib = tmp_path / "lib"
    shutil.copytree(pipeline.LIBRARY_DIR, lib, ignore=shutil.ignore_patterns("__pycache__"))
    files = pipeline.library_files(lib)
    assert files == pipeline.library_files()  # the same files give the same hashes, wherever they lie
    used = ["__init__.py", "repro.py", "models.py"]
    d0 = pipeline.library_digest(files, used)
    (lib / "__pycache__").mkdir(exist_ok=True)
    (lib / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    os.utime(lib / "repro.py", (1, 1))
    assert pipeline.library_digest(pipeline.library_files(lib), used) == d0  # byte code, mtimes: no
    (lib / "graph" / "viz.py").write_text((lib / "graph" / "viz.py").read_text() + "\n# edited\n")
    assert pipeline.library_digest(pipeline.library_files(lib), used) == d0  # a module not imported
    assert pipeline.library_digest(pipeline.library_files(lib)) != pipeline.library_digest(files)  # all
    (lib / "repro.py").write_text((lib / "repro.py").read_text() + "\n# edited\n")
    d1 = pipeline.library_digest(pipeline.library_files(lib), used)
    assert d1 != d0  # an imported module
    (lib / "templates.json").write_text("{}")
    assert pipeline.library_digest(pipeline.library_files(lib), used) != d1  # data the library may read
    (lib / "models.py").unlink()
    assert pipeline.library_digest(pipeline.library_files(lib), used) != d1  # an imported module gone


def _fixture_library(tmp_path: Path, monkeypatch, files: dict[str, str]) -> Path:
    """A package ``fixturelib`` made of ``files`` (name -> source), on the PYTHONPATH of the kernels and of the
    processes they start: the library whose modules a test's runs trace."""
    lib = tmp_path / "site" / "fixturelib"
    lib.mkdir(parents=True)
    for name, source in files.items():
        (lib / name).write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(lib.parent))
    return lib


def _pipeline_runs(capsys, nbs: Path, results: Path, lib: Path):
    """A function running the smoke pipeline over ``nbs`` with ``lib`` as the traced library: (state, the keys of
    the runs it executed)."""
    def run():
        capsys.readouterr()
        state = pipeline.run_pipeline(profile="smoke", notebooks_dir=nbs, results_root=results, progress=False,
                                      library_dir=lib)
        return state, re.findall(r"\[run \d+/\d+\] (\S+)", capsys.readouterr().err)

    return run


def test_editing_the_library_reruns_the_notebooks_that_import_it(tmp_path, monkeypatch, capsys):
    """Each run is keyed by the library modules its kernel imported, traced at run time: the module
    a function imports when called (``lazy``) counts, one nothing imports (``unused``) does not.
    Without the library in the hash the re-run would be skipped and keep the stale value."""
    lib = _fixture_library(tmp_path, monkeypatch, {
        "__init__.py": "", "used.py": "def value():\n    from . import lazy\n    return lazy.VALUE\n",
        "lazy.py": "VALUE = 1\n", "unused.py": "X = 0\n"})
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_other.ipynb", "", "x = 1")  # imports nothing of fixturelib
    write_nb(nbs / "10_use.ipynb", "",
             "from fixturelib import used\nfrom mags_lib import repro\n"
             "(repro.run_dir(run_tag, '10_use') / 'value.txt').write_text(str(used.value()))")
    run = _pipeline_runs(capsys, nbs, tmp_path / "results", lib)
    value = tmp_path / "results" / "smoke" / "10_use" / "value.txt"

    s1, ran = run()
    assert ran == ["00_other", "10_use"] and value.read_text() == "1"
    assert s1["notebooks"]["10_use"]["library_modules"] == ["__init__.py", "lazy.py", "used.py"]
    assert s1["notebooks"]["00_other"]["library_modules"] == []
    assert run()[1] == []  # nothing changed
    (lib / "unused.py").write_text("X = 1\n")
    assert run()[1] == []  # a module no notebook imported
    (lib / "lazy.py").write_text("VALUE = 2\n")
    s4, ran = run()
    assert ran == ["10_use"] and value.read_text() == "2"  # imported inside a function: traced all the same
    assert s4["notebooks"]["00_other"] == s1["notebooks"]["00_other"]


def test_modules_imported_only_in_processes_the_notebook_starts_count(tmp_path, monkeypatch, capsys):
    """A notebook that decodes in joblib workers (notebook 10's before row, the held-out evaluations) or runs
    ``python -m ...`` (the export's switch check) uses library modules its kernel never imports: those processes
    report them (``mags_lib._imports``), and editing one runs the notebook again. Before, the kernel's own modules
    were all the hash saw: the edit was skipped and the stale value kept."""
    lib = _fixture_library(tmp_path, monkeypatch, {
        "__init__.py": "from mags_lib._imports import install\ninstall(__name__)\n",
        "work.py": "def in_pool():\n    from . import pool_only\n    return pool_only.VALUE\n",
        "pool_only.py": "VALUE = 1\n", "child_only.py": "print(10)\n"})
    nbs = tmp_path / "nbs"
    write_nb(nbs / "10_workers.ipynb", "",
             "import subprocess, sys\nfrom joblib import Parallel, delayed\nimport fixturelib.work\n"
             "from mags_lib import repro\n"
             "pool = Parallel(n_jobs=2)(delayed(fixturelib.work.in_pool)() for _ in range(2))\n"
             "child = subprocess.run([sys.executable, '-m', 'fixturelib.child_only'], check=True, capture_output=True,"
             " text=True).stdout.strip()\n"
             "(repro.run_dir(run_tag, '10_workers') / 'value.txt').write_text(f'{pool[0]} {child}')")
    run = _pipeline_runs(capsys, nbs, tmp_path / "results", lib)
    value = tmp_path / "results" / "smoke" / "10_workers" / "value.txt"

    s1, ran = run()
    assert ran == ["10_workers"] and value.read_text() == "1 10"
    assert s1["notebooks"]["10_workers"]["library_modules"] == ["__init__.py", "child_only.py", "pool_only.py",
                                                                 "work.py"]
    assert not list(value.parent.glob(".*.tmp"))  # the traces are read and removed
    assert run()[1] == []  # nothing changed
    (lib / "pool_only.py").write_text("VALUE = 2\n")
    assert run()[1] == ["10_workers"] and value.read_text() == "2 10"
    (lib / "child_only.py").write_text("print(20)\n")
    assert run()[1] == ["10_workers"] and value.read_text() == "2 20"


def test_a_process_reports_the_library_modules_it_imports_under_a_pipeline_kernel(tmp_path):
    """mags_lib installs the recorder itself: a process started with MAGS_IMPORT_TRACE set writes each module it
    imports (``importlib.import_module`` included), once; the kernel that set the variable writes nothing, a process
    forked from it what it imports itself."""
    import subprocess
    import sys

    trace = tmp_path / "trace"
    code = ("import importlib, mags_lib.metrics; importlib.import_module('mags_lib.protocol'); "
            "import mags_lib.metrics")
    env = {**os.environ, "MAGS_IMPORT_TRACE": str(trace)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    names = trace.read_text().splitlines()
    assert names[0] == "mags_lib" and {"mags_lib.metrics", "mags_lib.protocol"} <= set(names)
    assert len(names) == len(set(names)) and all(n.startswith("mags_lib") for n in names)
    trace.unlink()
    kernel = ("import os; os.environ['MAGS_IMPORT_TRACE_KERNEL'] = str(os.getpid()); " + code + "\n"
              "pid = os.fork()\n"
              "if pid == 0:\n    import mags_lib.rewards\n    os._exit(0)\n"
              "os.waitpid(pid, 0)\n")
    subprocess.run([sys.executable, "-c", kernel], check=True, env=env)
    got = trace.read_text().splitlines()  # only the forked child's own imports, none the kernel made
    assert got[0] == "mags_lib.rewards" and not {"mags_lib", "mags_lib.metrics", "mags_lib.protocol"} & set(got)
    trace.unlink()
    subprocess.run([sys.executable, "-c", "import mags_lib.metrics"], check=True,
                   env={k: v for k, v in env.items() if k != "MAGS_IMPORT_TRACE"})
    assert not trace.exists()  # outside a pipeline run: nothing


def test_declared_inputs_name_parameters(tmp_path):
    nbs = tmp_path / "nbs"
    path = write_nb(nbs / "10_data.ipynb", 'data_path: str = "data/seed"  # folder read by the notebook\n',
                    mags={"inputs": ["{data_path}", "raw/{run_tag}.txt"]})
    info = pipeline.discover_notebooks(nbs)[0]
    (tmp_path / "data" / "seed" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "seed" / "sub" / "a.json").write_text("1")
    (tmp_path / "data" / "other").mkdir()
    (tmp_path / "data" / "other" / "a.json").write_text("1")
    params = dict(BASE)
    assert pipeline.declared_inputs(info, params) == ["data/seed", "raw/t.txt"]  # the default
    assert pipeline.declared_inputs(info, {**params, "data_path": "data/other"})[0] == "data/other"

    def h(p=params):
        return pipeline.input_hash(info, p, root=tmp_path, library="lib")

    h0 = h()
    (tmp_path / "data" / "seed" / "sub" / "a.json").write_text("2")  # a file deep in the folder
    h1 = h()
    assert h1 != h0
    (tmp_path / "data" / "other" / "a.json").write_text("2")  # a folder the run does not read
    assert h() == h1
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "t.txt").write_text("x")  # an input that did not exist before
    assert h() != h1
    assert h({**params, "data_path": "data/other"}) != h()

    nb = nbformat.read(path, as_version=4)
    nb.metadata["mags"]["inputs"] = ["{dat_path}/*.json"]
    nbformat.write(nb, path)
    with pytest.raises(PipelineError, match=r"names \{dat_path\}, which is not a parameter"):
        pipeline.run_pipeline(profile="smoke", notebooks_dir=nbs, results_root=tmp_path / "results")
    assert not (tmp_path / "results").exists()  # refused before anything ran


def test_an_input_pattern_falls_back_to_the_next_parameter(tmp_path):
    """``{a|b}``: the first of the parameters that is not empty (``trained_tag: str = ""  # empty: run_tag``)."""
    nbs = tmp_path / "nbs"
    write_nb(nbs / "30_read.ipynb", 'trained_tag: str = ""  # run tag of the models read; empty: run_tag\n',
             mags={"inputs": ["models/{trained_tag|run_tag}/meta.json"]})
    info = pipeline.discover_notebooks(nbs)[0]
    assert pipeline.declared_inputs(info, dict(BASE)) == ["models/t/meta.json"]  # BASE's run tag
    assert pipeline.declared_inputs(info, {**BASE, "trained_tag": "other"}) == ["models/other/meta.json"]
    for tag in ("t", "other"):
        (tmp_path / "models" / tag).mkdir(parents=True)
        (tmp_path / "models" / tag / "meta.json").write_text("1")

    def h(**p):
        return pipeline.input_hash(info, {**BASE, **p}, root=tmp_path, library="lib", environment="env")

    h_own, h_other = h(), h(trained_tag="other")
    (tmp_path / "models" / "other" / "meta.json").write_text("2")  # the other run's models retrained
    assert h(trained_tag="other") != h_other and h() == h_own
    nb = nbformat.read(info.path, as_version=4)
    nb.metadata["mags"]["inputs"] = ["models/{trained_tag|run_tg}/meta.json"]
    nbformat.write(nb, info.path)
    with pytest.raises(PipelineError, match=r"names \{run_tg\}, which is not a parameter"):
        pipeline.declared_inputs(info, dict(BASE))


# --- progress: cells and the kernel's output reach the runner's log while the cell runs -------


class _Watcher(io.TextIOBase):
    """A log stream that creates ``sentinel`` once it has seen ``marker`` (the notebook waits for it)."""

    def __init__(self, sentinel: Path, marker: str):
        self.sentinel, self.marker, self.text = sentinel, marker, ""

    def write(self, s):
        self.text += s
        if self.marker in self.text and not self.sentinel.exists():
            self.sentinel.write_text("seen")
        return len(s)


def test_running_cells_and_their_progress_reach_the_log_while_they_run(tmp_path):
    """The cell blocks until the runner's log has shown its finished tqdm bar: a runner that only
    printed the output after the cell (or never) would make it raise."""
    sentinel = tmp_path / "seen"
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_slow.ipynb", f'sentinel: str = {str(sentinel)!r}  # file the test creates\n',
             "import pathlib, time\nfrom tqdm.auto import tqdm",
             "for _ in tqdm(range(7), desc='counting sheep'):\n    pass\n"
             "deadline = time.monotonic() + 120\n"
             "while not pathlib.Path(sentinel).exists():\n"
             "    if time.monotonic() > deadline:\n"
             "        raise TimeoutError('the runner did not relay the progress while the cell ran')\n"
             "    time.sleep(0.05)\n"
             "print('after the wait')")
    log = _Watcher(sentinel, "counting sheep: 100%")
    state = pipeline.run_pipeline(profile="smoke", notebooks_dir=nbs, results_root=tmp_path / "results",
                                  log=log)
    assert state["notebooks"]["00_slow"]["status"] == "done"
    text = log.text
    cell_line = text.index("00_slow: code cell 3/3 (cell 3) for _ in tqdm(range(7)")
    bar = text.index("counting sheep: 100%")
    assert text.index("00_slow: code cell 2/3 (cell 2) import pathlib") < cell_line < bar
    assert "7/7 [" in text[bar:]  # the text bar, not an ipywidgets one
    assert "\r    | counting sheep" in text  # a redraw stays indented
    assert "\n    | after the wait" in text
    assert text.index("after the wait") < text.index("[done 1/1] 00_slow")
    executed = nbformat.read(tmp_path / "results/smoke/00_slow/00_slow.ipynb", as_version=4)
    loop = next(c for c in executed.cells if c.source.startswith("for _ in tqdm"))
    assert "7/7" in "".join(o.get("text", "") for o in loop.outputs)  # the copy keeps the bar too


def test_relay_indents_every_line_and_redraw():
    out = io.StringIO()
    relay = pipeline._Relay(out, prefix="> ")
    err, std = relay.stream("stderr"), relay.stream("stdout")
    err.write("a\nb")
    err.write("c\r 50%")
    err.write("\r100%")
    std.write("printed\n")  # stdout in the middle of an open bar line starts a new line
    err.write("x")
    relay.end_line()
    assert out.getvalue() == "> a\n> bc\r>  50%\r> 100%\n> printed\n> x\n"


def test_two_pipelines_on_one_run_tag_keep_each_others_records(tmp_path):
    """Two runs on one run tag (--only 30 and --only 45 side by side) each write their own record; neither
    erases the other's, and each sees the other's progress after its next write."""
    path = tmp_path / "pipeline.json"
    start = {"version": 1, "run_tag": "t", "profile": "default", "notebooks": {"00_a": {"status": "done"}}}
    path.write_text(json.dumps(start))
    a, b = pipeline._load_state(path), pipeline._load_state(path)  # both loaded before either writes
    rec_a = a["notebooks"]["30_x"] = {"status": "running"}
    pipeline._save_state(path, a, "30_x")
    b["notebooks"]["45_y"] = {"status": "running"}
    pipeline._save_state(path, b, "45_y")
    assert set(b["notebooks"]) == {"00_a", "30_x", "45_y"}  # b now sees a's run
    rec_a["status"] = "done"  # a finishes, holding its own record object
    pipeline._save_state(path, a, "30_x")
    disk = json.loads(path.read_text())["notebooks"]
    assert disk == {"00_a": {"status": "done"}, "30_x": {"status": "done"}, "45_y": {"status": "running"}}
    assert a["notebooks"]["30_x"] is rec_a and a["notebooks"] == disk


# --- needs and parallel runs --------------------------------------------------------------------

def _wait_for(name: str) -> str:
    """Notebook code: write ``<name of this notebook>.started``, then wait (at most 120 s) for the file
    ``name``: two notebooks waiting for each other both finish only when they run at the same time."""
    return ("import pathlib, time\n"
            "from mags_lib import repro\n"
            "here = repro.run_dir(run_tag, 'shared')\n"
            "(here / f'{NAME}.started').write_text('1')\n"
            "deadline = time.monotonic() + 120\n"
            f"while not (here / {name!r}).exists():\n"
            "    assert time.monotonic() < deadline, 'the other notebook never ran beside this one'\n"
            "    time.sleep(0.05)\n")


@pytest.fixture
def needs_dir(tmp_path):
    """00_a and 05_c need nothing (and wait for each other), 10_b needs 00_a (and reads what it wrote)."""
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "", "NAME = 'a'\n" + _wait_for("c.started"),
             "(here / 'a.done').write_text('1')", mags={"needs": []})
    write_nb(nbs / "05_c.ipynb", "", "import os\nNAME = 'c'\nprint('hello from c, threads', os.environ.get('OMP_NUM_THREADS'))\n"
             + _wait_for("a.started"),
             mags={"needs": []})
    write_nb(nbs / "10_b.ipynb", "", "from mags_lib import repro\n"
             "assert (repro.run_dir(run_tag, 'shared') / 'a.done').exists(), 'b ran before a finished'",
             mags={"needs": ["00_a"]})
    return nbs


def test_parallel_runs_overlap_and_wait_for_what_they_need(tmp_path, needs_dir, capsys):
    """--jobs 3: a and c run at once (each waits for the other to start, so a one-at-a-time run would fail),
    b waits for a although a slot is free; relayed lines carry their run's key; memory is per kernel; each
    kernel's OpenMP pool gets the cores divided by the jobs."""
    root = tmp_path / "results"
    rc = pipeline.main(["--notebooks-dir", str(needs_dir), "--results-root", str(root), "--profile", "smoke",
                        "--jobs", "3"])
    err = capsys.readouterr().err
    assert rc == 0, err[-3000:]
    state = json.loads((root / "smoke" / "pipeline.json").read_text())
    assert {k: r["status"] for k, r in state["notebooks"].items()} == {"00_a": "done", "05_c": "done", "10_b": "done"}
    assert all(r["peak_mem_mb"] > 10 for r in state["notebooks"].values())
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, len(os.sched_getaffinity(0)) // 3))
    assert f"    05_c | hello from c, threads {threads}\n" in err
    lines = err.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("[done") and "00_a" in x)) < \
        lines.index(next(x for x in lines if x.startswith("[run") and "10_b" in x))


def test_the_same_notebooks_one_at_a_time_fail_where_they_must_overlap(tmp_path, needs_dir, capsys):
    """The check of the test above can fail: run one at a time, a waits for c in vain (shortened wait)."""
    nb = nbformat.read(needs_dir / "00_a.ipynb", as_version=4)
    nb.cells[2].source = nb.cells[2].source.replace("+ 120", "+ 3")
    nbformat.write(nb, needs_dir / "00_a.ipynb")
    root = tmp_path / "results"
    rc = pipeline.main(["--notebooks-dir", str(needs_dir), "--results-root", str(root), "--profile", "smoke",
                        "--no-progress"])
    assert rc == 1
    assert "the other notebook never ran beside this one" in capsys.readouterr().err


def test_a_run_reruns_when_what_it_needs_changed_not_when_another_notebook_did(tmp_path, needs_dir, capsys):
    def run():
        rc = pipeline.main(["--notebooks-dir", str(needs_dir), "--results-root", str(tmp_path / "results"),
                            "--profile", "smoke", "--no-progress", "--jobs", "2"])
        err = capsys.readouterr().err
        assert rc == 0, err[-3000:]
        return {line.split()[2].rstrip(":"): line.split()[0][1:] for line in err.splitlines()
                if line.startswith(("[run", "[skip"))}

    def edit(name: str, extra: str) -> None:
        nb = nbformat.read(needs_dir / name, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(extra))
        nbformat.write(nb, needs_dir / name)

    def clear() -> None:  # the rendezvous files of the last run
        for f in (tmp_path / "results" / "smoke" / "shared").glob("*.started"):
            f.unlink()

    assert run() == {"00_a": "run", "05_c": "run", "10_b": "run"}
    clear()
    assert run() == {"00_a": "skip", "05_c": "skip", "10_b": "skip"}
    # 05_c changed: only it runs again (b does not need it), and it waits for a, which is done: let it pass
    edit("05_c.ipynb", "y = 2")
    (tmp_path / "results" / "smoke" / "shared" / "a.started").write_text("1")
    assert run() == {"00_a": "skip", "05_c": "run", "10_b": "skip"}
    # 00_a changed: it and b (which needs it) run again
    edit("00_a.ipynb", "z = 3")
    clear()
    (tmp_path / "results" / "smoke" / "shared" / "c.started").write_text("1")
    assert run() == {"00_a": "run", "05_c": "skip", "10_b": "run"}


def test_a_failure_stops_new_runs_keeps_the_others_and_says_what_did_not_start(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "", "raise RuntimeError('a broke')", mags={"needs": []})
    write_nb(nbs / "05_c.ipynb", "", "x = 1", mags={"needs": []})
    write_nb(nbs / "10_b.ipynb", "", "x = 2", mags={"needs": ["00_a"]})
    root = tmp_path / "results"
    rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(root), "--profile", "smoke",
                        "--no-progress", "--jobs", "2"])
    err = capsys.readouterr().err
    assert rc == 1 and "a broke" in err and "not started after the failure: 10_b" in err
    state = json.loads((root / "smoke" / "pipeline.json").read_text())
    assert {k: r["status"] for k, r in state["notebooks"].items()} == {"00_a": "failed", "05_c": "done"}


@pytest.mark.parametrize(("needs", "message"), [
    (["99_later"], "which is not a notebook"),
    (["10_b"], "does not come before"),
    ("00_a", "must be a list"),
])
def test_a_bad_needs_entry_is_an_error_before_anything_runs(tmp_path, capsys, needs, message):
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "", "x = 1")
    write_nb(nbs / "05_c.ipynb", "", "x = 1", mags={"needs": needs})
    write_nb(nbs / "10_b.ipynb", "", "x = 1")
    root = tmp_path / "results"
    rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(root), "--profile", "smoke",
                        "--no-progress"])
    assert rc == 2 and message in capsys.readouterr().err
    assert not (root / "smoke" / "pipeline.json").exists()


@pytest.mark.parametrize("only", ["", ",", " , "])
def test_an_empty_only_is_an_error_not_every_notebook(tmp_path, capsys, only):
    """``--only "$NB"`` with the variable unset must not start the whole default profile."""
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "", "x = 1")
    root = tmp_path / "results"
    for extra in ([], ["--list"]):
        rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(root), "--profile", "smoke",
                            "--no-progress", "--only", only, *extra])
        assert rc == 2 and "names no notebook" in capsys.readouterr().err
    assert not root.exists()


def test_an_unusable_results_folder_is_a_clear_error(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "", "x = 1")
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(afile), "--profile", "smoke",
                        "--no-progress"])
    assert rc == 2 and "choose another with --results-root" in capsys.readouterr().err
    assert afile.read_text() == "not a folder"
    (tmp_path / "r" / "smoke").mkdir(parents=True)
    (tmp_path / "r" / "smoke" / "pipeline.json").write_text(json.dumps({"notebooks": {"00_a": "done"}}))
    rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(tmp_path / "r"), "--profile", "smoke",
                        "--no-progress"])
    assert rc == 2 and "must map each run to its record" in capsys.readouterr().err


def test_jobs_must_be_a_positive_integer(tmp_path):
    with pytest.raises(PipelineError, match="jobs must be an integer >= 1"):
        pipeline.run_pipeline(profile="smoke", results_root=tmp_path, jobs=0)


def test_the_project_notebooks_declare_what_they_need():
    """Every notebook says what it needs (the parallel smoke run and the resume hashes rely on it); the
    model-using notebooks wait for the trained models and their export."""
    nbs = pipeline.discover_notebooks()
    needs = {nb.name: pipeline.notebook_needs(nb, nbs) for nb in nbs}
    for nb in nbs:
        if nb.name != "90_report":
            assert "needs" in pipeline._nb_metadata(nb), nb.name
    assert needs["20_train_ask_write"] == ["10_generate_datasets"]
    for name in ("25_training_objectives", "30_export_gguf"):
        assert "20_train_ask_write" in needs[name]
    for name in ("50_game_evaluation", "55_textworld", "60_ablations", "70_locomo_benchmark"):
        assert "30_export_gguf" in needs[name]
    assert needs["90_report"] == [nb.name for nb in nbs if nb.name != "90_report"]


@pytest.mark.parametrize("signame,rc", [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_in_a_parallel_run_stops_every_kernel_and_records_the_runs_as_interrupted(tmp_path, signame, rc):
    """SIGINT (Ctrl-C) or SIGTERM (kill, a batch system's limit) to the runner while two notebooks run at once
    (each waits for a file that never comes): both kernels are interrupted, both runs are recorded as
    interrupted (SIGTERM left them "running" before), the runner exits with 130 / 143."""
    import signal
    import subprocess
    import sys

    nbs = tmp_path / "nbs"
    for name in ("00_a", "05_c"):
        write_nb(nbs / f"{name}.ipynb", "", f"NAME = {name!r}\n" + _wait_for("never"), mags={"needs": []})
    root = tmp_path / "results"
    env = {**os.environ, "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data")}
    # A suite started in the background (`nohup bash scripts/test.sh &`) passes SIGINT on ignored, and Python leaves
    # it so: the runner never saw the Ctrl-C this test sends and the test hung (seen 2026-12-01). Its own default.
    proc = subprocess.Popen([sys.executable, "-m", "mags_lib.pipeline", "--notebooks-dir", str(nbs),
                             "--results-root", str(root), "--profile", "smoke", "--no-progress", "--jobs", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    shared = root / "smoke" / "shared"
    deadline = time.monotonic() + 120
    while not ((shared / "00_a.started").exists() and (shared / "05_c.started").exists()):
        assert proc.poll() is None and time.monotonic() < deadline, "the two notebooks did not both start"
        time.sleep(0.1)
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == rc, err[-3000:]
    state = json.loads((root / "smoke" / "pipeline.json").read_text())
    assert {k: r["status"] for k, r in state["notebooks"].items()} == {"00_a": "interrupted", "05_c": "interrupted"}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_folder_papermill_kept_from_an_earlier_run_is_not_used(tmp_path, capsys, jobs):
    """papermill's local file handler keeps a working directory between calls, and two notebooks run in
    threads restore it in either order, so a parallel run could leave it at its notebooks' folder; once that
    folder was removed, every later run failed writing its notebook (FileNotFoundError, a suite flake)."""
    from papermill.iorw import papermill_io

    gone = tmp_path / "earlier_run_nbs"
    gone.mkdir()
    gone.rmdir()
    papermill_io.get_handler("local").cwd(str(gone))  # what a parallel run could leave behind
    nbs = tmp_path / "nbs"
    write_nb(nbs / "00_a.ipynb", "", "x = 1", mags={"needs": []})
    write_nb(nbs / "05_c.ipynb", "", "y = 2", mags={"needs": []})
    rc = pipeline.main(["--notebooks-dir", str(nbs), "--results-root", str(tmp_path / "results"), "--profile",
                        "smoke", "--no-progress", "--jobs", jobs])
    assert rc == 0, capsys.readouterr().err[-3000:]
    assert papermill_io.get_handler("local").cwd(None) is None  # and the run leaves none behind
