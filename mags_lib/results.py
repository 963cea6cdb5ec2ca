"""One metrics shape for every notebook, the run's collected results, and the README's results block.

A *record* is one headline number::

    {"name": "ask grpo free op F1", "value": 0.41, "unit": "F1", "n": 100,
     "interval": [0.33, 0.49], "source": "notebooks/20_train_ask_write.ipynb"}

``value`` is a finite number or ``None``; ``n`` the sample size or ``None``; ``interval`` a 95 %
bootstrap ``[lo, hi]`` or ``None``. Each notebook writes ``results/<run_tag>/<stage>/metrics.json``
with :func:`write_metrics`: ``{"format", "stage", "source", "records", **details}`` -- its detailed
keys stay at top level for the readers that already use them, and its records come from the
stage's extractor below when not given.

Command line::

    python -m mags_lib.results readme --run-tag default   # reports/default.json + README block
    python -m mags_lib.results readme --check             # exit 1 with a diff when they differ
"""
from __future__ import annotations

import argparse
import difflib
import itertools
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mags_lib import repro

__all__ = ["FORMAT", "RESERVED_KEYS", "SECTIONS", "EXTRACTORS", "record", "validate_record",
           "write_metrics", "read_metrics", "extract_records", "stage_of", "collect", "run_info",
           "report_data", "sections", "render_markdown", "render_readme_block",
           "plot_training", "plot_intervals", "update_readme", "main"]

FORMAT = "mags-metrics/1"
RESERVED_KEYS = ("format", "stage", "source", "records")
RECORD_KEYS = ("name", "value", "unit", "n", "interval", "source")
README_BEGIN = "<!-- results:begin -->"
README_END = "<!-- results:end -->"
NO_METRICS = {"40_graph_dynamics": "by design: it draws pictures of the graph's dynamics"}
"""Notebooks that write no ``metrics.json`` on purpose, with the reason the report shows."""

SECTIONS: dict[str, tuple[str, ...]] = {
    "environment": ("00_environment_check",),
    "training": ("10_generate_datasets", "20_train_ask_write"),
    "training objectives": ("25_training_objectives",),
    "export": ("30_export_gguf",),
    "graph dynamics": ("40_graph_dynamics",),
    "consolidation": ("45_consolidation",),
    "game": ("50_game_evaluation",),
    "TextWorld": ("55_textworld",),
    "ablations": ("60_ablations",),
    "LoCoMo": ("70_locomo_benchmark",),
}
"""Report sections in order, each with the notebooks whose records it shows (speed is every record
in seconds or tokens/s, whatever its stage)."""
SPEED_UNITS = ("s", "tokens/s")
_STAGE_RE = re.compile(r"^\d{2}_[A-Za-z0-9_]+$")


# ------------------------------------------------------------------------------------------------
# the record
def _num(x: Any) -> float | None:
    """A finite float, or ``None`` for None / NaN / inf (a value that was not measured)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def record(name: str, value: Any, unit: str, *, source: str, n: Any = None,
           interval: Sequence[Any] | None = None) -> dict:
    """Build and validate one record (NaN / missing values become ``None``)."""
    iv = None
    if interval is not None:
        lo, hi = _num(interval[0]), _num(interval[1])
        iv = [lo, hi] if lo is not None and hi is not None else None
    if n is not None and _num(n) is not None and float(n) != int(n):
        raise ValueError(f"record {name!r}: n counts items, got {n!r}")
    rec = {"name": name, "value": _num(value), "unit": unit,
           "n": None if n is None or _num(n) is None else int(n), "interval": iv, "source": source}
    validate_record(rec)
    return rec


def validate_record(rec: Any, where: str = "record") -> None:
    """Raise ``ValueError`` naming the record and field when ``rec`` is not a valid record."""
    if not isinstance(rec, Mapping):
        raise ValueError(f"{where} must be a dict with keys {list(RECORD_KEYS)}, got {type(rec).__name__}")
    label = f"{where} {rec.get('name')!r}" if isinstance(rec.get("name"), str) else where
    if set(rec) != set(RECORD_KEYS):
        missing, extra = sorted(set(RECORD_KEYS) - set(rec)), sorted(set(rec) - set(RECORD_KEYS))
        raise ValueError(f"{label}: keys must be exactly {list(RECORD_KEYS)} (missing {missing}, unknown {extra})")
    for key in ("name", "unit", "source"):
        if not isinstance(rec[key], str) or not rec[key].strip():
            raise ValueError(f"{label}: field {key!r} must be a non-empty string, got {rec[key]!r}")

    def finite(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    if rec["value"] is not None and not finite(rec["value"]):
        raise ValueError(f"{label}: field 'value' must be a finite number or null, got {rec['value']!r}")
    n = rec["n"]
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f"{label}: field 'n' must be a sample size (int >= 0) or null, got {n!r}")
    iv = rec["interval"]
    if iv is not None:
        if not isinstance(iv, (list, tuple)) or len(iv) != 2 or not all(finite(x) for x in iv):
            raise ValueError(f"{label}: field 'interval' must be [lo, hi] of two finite numbers or null, got {iv!r}")
        if iv[0] > iv[1]:
            raise ValueError(f"{label}: field 'interval' has lo > hi: {list(iv)!r}")


def _validate_records(recs: Sequence[Any], where: str) -> None:
    if not isinstance(recs, (list, tuple)):
        raise ValueError(f"{where}: records must be a list of records, got {type(recs).__name__}")
    seen = set()
    for i, r in enumerate(recs):
        validate_record(r, f"{where} record {i}")
        if r["name"] in seen:
            raise ValueError(f"{where} record {i}: name {r['name']!r} repeats an earlier record's name")
        seen.add(r["name"])


# ------------------------------------------------------------------------------------------------
# extractors: a notebook's details -> its headline records
Extractor = Callable[[Mapping[str, Any], str], list]
EXTRACTORS: dict[str, Extractor] = {}


def _extractor(stage: str) -> Callable[[Extractor], Extractor]:
    def deco(fn: Extractor) -> Extractor:
        EXTRACTORS[stage] = fn
        return fn
    return deco


_ROLE_METRICS = {"ask": (("adherence", "share"), ("op_f1", "F1"), ("exact_f1", "F1")),
                 "write": (("adherence", "share"), ("op_f1", "F1"), ("exact_f1", "F1")),
                 "answer": (("accuracy", "accuracy"), ("abstain_acc", "accuracy"))}


def _score_records(rows: Sequence[Mapping], prefix: Callable[[Mapping], str], src: str) -> list:
    out = []
    for row in rows:
        for key, unit in _ROLE_METRICS.get(row.get("role"), ()):
            out.append(record(f"{prefix(row)} {key}", row.get(key), unit, n=row.get("n"), source=src))
    return out


@_extractor("00_environment_check")
def _x00(d: Mapping, src: str) -> list:
    gen = d.get("generation", {})
    return [record(f"{b} generation", gen.get(f"{b}_tokens_per_s"), "tokens/s", source=src)
            for b in ("llamacpp", "transformers") if f"{b}_tokens_per_s" in gen]


@_extractor("10_generate_datasets")
def _x10(d: Mapping, src: str) -> list:
    return _score_records(d.get("before") or [], lambda r: f"before {r['set']} {r['mode']}", src)


@_extractor("20_train_ask_write")
def _x20(d: Mapping, src: str) -> list:
    role = d["role"]
    out = _score_records(d.get("scores") or [], lambda r: f"{role} {r['stage']} {r['set']} {r['mode']}"
                         + ("" if r.get("engine", "llamacpp") == "llamacpp" else f" {r['engine']}"), src)
    for stage, info in (d.get("train") or {}).items():
        if isinstance(info, Mapping) and not info.get("skipped"):
            out.append(record(f"{role} {stage} training wall time", info.get("wall_time_s"), "s",
                              n=info.get("steps"), source=src))
    return out


@_extractor("25_training_objectives")
def _x25(d: Mapping, src: str) -> list:
    role, out = d.get("role", "?"), []
    for row in d.get("variants") or []:
        v = row.get("variant")
        for key, label, unit in (("op_f1_gen", "op F1 generated", "F1"), ("exact_f1_gen", "exact F1 generated", "F1"),
                                 ("op_f1_seed", "op F1 seed", "F1"), ("ops_per_input", "operations per input", "count"),
                                 ("heldout_outcome", "held-out outcome", "share"),
                                 ("zero_std_mean", "zero-variance groups", "share")):
            if _num(row.get(key)) is not None:
                out.append(record(f"{role} {v} {label}", row.get(key), unit,
                                  n=row.get("n_outcome") if key == "heldout_outcome" else None, source=src))
    for row in (d.get("one_model") or {}).get("table") or []:  # section 5: one model for all roles vs specialised
        for model in ("specialised", "one_model"):
            out.append(record(f"{row['role']} {row['stage']} {row['set']} {row['mode']} {row['metric']} "
                              f"{model.replace('_', ' ')}", row.get(model), "F1" if "f1" in row["metric"] else "share",
                              n=row.get("n"), source=src))
    return out


@_extractor("30_export_gguf")
def _x30(d: Mapping, src: str) -> list:
    out = []
    for role, variants in (d.get("parity") or {}).items():
        for variant, p in variants.items():
            out.append(record(f"{role} {variant} top-1 agreement", p.get("top1_agreement"), "share",
                              n=p.get("n_positions"), source=src))
            # the exported file's quality on the same held-out prompts (the role's metrics; None: not its role)
            for key, label, unit in (("adherence", "adherence", "share"), ("op_f1", "op F1", "F1"),
                                     ("accuracy", "answer accuracy", "accuracy")):
                if _num(p.get(key)) is not None:
                    out.append(record(f"{role} {variant} {label}", p.get(key), unit, n=p.get("n_prompts"),
                                      source=src))
    for role, s in (d.get("export_seconds") or {}).items():
        out.append(record(f"{role} export", s, "s", source=src))
    for row in d.get("switch") or []:
        if row.get("what", "").startswith("switch adapter"):
            out.append(record(f"{row['backend']} adapter switch p50", row.get("p50_s"), "s",
                              n=row.get("n"), source=src))
    lat = d.get("latency") or {}
    for op in ("ask", "observe"):
        if f"{op}_p50_s" in lat:  # n: the turns timed (bench_mags_latency's n_ask / n_observe), when recorded
            out.append(record(f"{op} p50", lat[f"{op}_p50_s"], "s", n=lat.get(f"n_{op}"), source=src))
    return out


# notebook 45's serving policies besides "always" (MAGSConfig.consolidated_when): key suffix, label
_X45_POLICIES = (("closed_only", "closed-book only"), ("fallback", "closed-book or when the reader abstains"))


@_extractor("45_consolidation")
def _x45(d: Mapping, src: str) -> list:
    out = []
    for when in ("before", "after"):
        cb = (d.get(when) or {}).get("closed_book") or {}
        out.append(record(f"closed-book accuracy {when}", cb.get("accuracy"), "accuracy",
                          n=cb.get("n"), source=src))
    p0, p1 = _num((d.get("before") or {}).get("perplexity")), _num((d.get("after") or {}).get("perplexity"))
    out.append(record("perplexity change (after - before)", None if p0 is None or p1 is None else p1 - p0,
                      "perplexity", source=src))
    for when in ("before", "after"):
        ob = (d.get(when) or {}).get("open_book") or {}
        if _num(ob.get("accuracy")) is not None:
            out.append(record(f"open-book accuracy {when}", ob.get("accuracy"), "accuracy", n=ob.get("n"), source=src))
        ar = (d.get(when) or {}).get("answer_role") or {}
        if _num(ar.get("accuracy")) is not None:
            out.append(record(f"answer role accuracy {when}", ar.get("accuracy"), "accuracy", n=ar.get("n"),
                              source=src))
    neg = (d.get("after") or {}).get("negatives") or {}
    if _num(neg.get("accuracy")) is not None:
        out.append(record("abstains on facts not consolidated, after", neg.get("accuracy"), "accuracy",
                          n=neg.get("n"), source=src))
    ch = d.get("changed") or {}
    if ch.get("n"):
        out.append(record("changed facts: open-book answers the new value", ch.get("open_book_new"), "share",
                          n=ch.get("n"), source=src))
        out.append(record("changed facts: closed-book answers the old value", ch.get("closed_book_old"), "share",
                          n=ch.get("n"), source=src))
        for key, label in _X45_POLICIES:
            if _num(ch.get(f"open_book_new_adapter_{key}")) is not None:
                out.append(record(f"changed facts: open-book answers the new value, adapter {label}",
                                  ch.get(f"open_book_new_adapter_{key}"), "share", n=ch.get("n"), source=src))
    for key, label in _X45_POLICIES:
        ob = (d.get("after") or {}).get(f"open_book_adapter_{key}") or {}
        if _num(ob.get("accuracy")) is not None:
            out.append(record(f"open-book accuracy after, adapter {label}", ob.get("accuracy"), "accuracy",
                              n=ob.get("n"), source=src))
    out.append(record("consolidation", (d.get("consolidation") or {}).get("seconds"), "s", source=src))
    return out


@_extractor("50_game_evaluation")
def _x50(d: Mapping, src: str) -> list:
    out = []
    for system, cats in (d.get("accuracy") or {}).items():
        a = cats.get("overall") or {}
        out.append(record(f"{system} accuracy", a.get("accuracy"), "accuracy", n=a.get("n_asks"),
                          interval=(a.get("lo"), a.get("hi")), source=src))
    if d.get("generation_memo") is None:  # a shared memo answers remembered calls in 0 s: no latency then
        for system, ops in (d.get("latency") or {}).items():
            ask = ops.get("ask") or {}  # n: the ask turns timed (game.summary_metrics records it)
            out.append(record(f"{system} ask p50", ask.get("p50_s"), "s", n=ask.get("n"), source=src))
    return out


@_extractor("60_ablations")
def _x60(d: Mapping, src: str) -> list:
    """The same ``game.summary_metrics`` shape as 50; notebook 60 has always shared generations through
    a memo, so a file from before ``generation_memo`` was recorded counts as shared: accuracy only."""
    return _x50({**d, "generation_memo": d.get("generation_memo", {"hits": None})}, src)


@_extractor("55_textworld")
def _x55(d: Mapping, src: str) -> list:
    if d.get("skipped") is True:
        return []
    out = []
    ci = d.get("state_accuracy_ci") or {}
    for system, acc in (d.get("state_accuracy") or {}).items():
        out.append(record(f"{system} state accuracy", acc.get("overall"), "accuracy", n=d.get("n_questions"),
                          interval=ci.get(system), source=src))
    for agent, a in (d.get("agent") or {}).items():
        # n: the row's own episodes (agent_games treasure hunts, n_episodes of the cooking game), not the state
        # study's n_games; a file from before the episodes were recorded has no n to give
        n = a.get("episodes")
        out.append(record(f"{agent} success", a.get("success"), "share", n=n, source=src))
        out.append(record(f"{agent} steps", a.get("steps"), "steps", n=n, interval=a.get("steps_ci"), source=src))
    return out


@_extractor("70_locomo_benchmark")
def _x70(d: Mapping, src: str) -> list:
    if d.get("status") == "skipped":
        return []
    out = []
    for retriever, r in (d.get("recall") or {}).items():
        for key, v in r.items():
            if key.startswith("recall@") and " " not in key:
                # the means leave out the questions without evidence: n is what they average
                n = r.get("n_questions")
                n = None if n is None else n - (r.get("n_no_evidence") or 0)
                out.append(record(f"{retriever} {key}", v, "recall", n=n, source=src))
    for system, q in (d.get("qa") or {}).items():
        out.append(record(f"{system} QA", q.get("f1"), "F1", n=q.get("n_questions"), source=src))
    return out


def extract_records(stage: str, details: Mapping[str, Any], source: str | None = None) -> list[dict]:
    """The headline records of a stage's details (``stage`` may carry a matrix value)."""
    nb = stage.split("/")[0]
    if nb not in EXTRACTORS:
        raise ValueError(f"no record extractor for stage {stage!r}: register one in mags_lib/results.py "
                         f"(known: {sorted(EXTRACTORS)}) or pass records=")
    return EXTRACTORS[nb](details, source or f"notebooks/{nb}.ipynb")


# ------------------------------------------------------------------------------------------------
# writing and reading
def stage_of(out_dir: Path | str) -> tuple[str, str]:
    """``(run_tag, stage)`` of ``results/<run_tag>/<NN_name>[/<matrix value>]``."""
    parts = Path(out_dir).resolve().parts
    for i in (len(parts) - 1, len(parts) - 2):  # results/<tag>/<NN_name> or .../<NN_name>/<value>
        if i > 0 and _STAGE_RE.match(parts[i]):
            return parts[i - 1], "/".join(parts[i:])
    raise ValueError(f"{out_dir} is not a stage folder results/<run_tag>/<NN_name>[/<value>] "
                     f"(make it with repro.run_dir(run_tag, stage))")


def _json_default(x: Any) -> Any:
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def write_metrics(out_dir: Path | str, details: Mapping[str, Any], *, records: Sequence[dict] | None = None) -> Path:
    """Write ``out_dir/metrics.json`` atomically in the one metrics shape.

    Parameters
    ----------
    out_dir : path
        The stage folder, ``results/<run_tag>/<NN_name>[/<matrix value>]``.
    details : dict
        The notebook's detailed numbers, kept at the top level of the file.
    records : list of dict, optional
        Headline records; by default the stage's extractor makes them from ``details``.

    Returns
    -------
    Path
        The file written.

    Raises
    ------
    ValueError
        A details key that is one of ``format``, ``stage``, ``source``, ``records``; an invalid
        record (the message names the record and the field); a folder that is not a stage folder.
    """
    clash = [k for k in RESERVED_KEYS if k in details]
    if clash:
        raise ValueError(f"details use the reserved key(s) {clash} of metrics.json; rename them "
                         f"(reserved: {list(RESERVED_KEYS)})")
    _, stage = stage_of(out_dir)
    source = f"notebooks/{stage.split('/')[0]}.ipynb"
    recs = list(records) if records is not None else extract_records(stage, details, source)
    _validate_records(recs, stage)
    doc = {"format": FORMAT, "stage": stage, "source": source, "records": recs, **details}
    text = json.dumps(doc, indent=1, default=_json_default) + "\n"
    return repro.atomic_write_text(Path(out_dir) / "metrics.json", text)


def read_metrics(path: Path | str) -> dict:
    """Read a ``metrics.json``; an old file without records gets them from its extractor."""
    path = Path(path)
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):  # a damaged file, reported as such (collect catches ValueError)
        raise ValueError(f"{path}: a metrics file is a JSON object, got {type(doc).__name__}")  # noqa: TRY004
    if doc.get("format") == FORMAT:
        if not isinstance(doc.get("records"), list):
            raise ValueError(f"{path}: field 'records' must be a list of records")
        _validate_records(doc["records"], str(path))
        return doc
    if doc.get("format") is not None:  # another writer's, or a newer version: its records are not ours to trust
        raise ValueError(f"{path}: format {doc.get('format')!r} is not {FORMAT!r}; run its notebook again")
    _, stage = stage_of(path.parent)
    try:  # an old file without records: its extractor reads them from the details
        recs = extract_records(stage, doc)
        _validate_records(recs, str(path))
    except (AttributeError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: its details do not have the shape the {stage} extractor reads ({exc}); run "
                         "its notebook again") from None
    rest = {k: v for k, v in doc.items() if k not in ("format", "records")}
    return {"format": FORMAT, "stage": stage, "source": f"notebooks/{stage.split('/')[0]}.ipynb", **rest,
            "records": recs}


def _skip_reason(doc: Mapping) -> str | None:
    if doc.get("skipped") is True or doc.get("status") == "skipped":
        return str(doc.get("reason") or "skipped")
    return None


# ------------------------------------------------------------------------------------------------
# collecting a run
def _expected_stages(notebooks_dir: Path | None) -> list[str]:
    from mags_lib import pipeline
    out = []
    for nb in pipeline.discover_notebooks(notebooks_dir):
        if nb.name == "90_report":
            continue
        matrix = pipeline.notebook_matrix(nb)
        combos = itertools.product(*matrix.values()) if matrix else [()]
        out += ["/".join([nb.name, *map(str, c)]) for c in combos]  # the runner's record keys
    return out


def _run_command(stage: str, run_tag: str, profile: str | None = None) -> str:
    nb, _, value = stage.partition("/")
    # the profile the run tag holds: the runner refuses another profile's run into it
    cmd = ("python -m mags_lib.pipeline" + (f" --profile {profile}" if profile else "")
           + f" --run-tag {run_tag} --only {nb[:2]}")
    if value:
        cmd += f" -p role={value}" if nb.startswith("20_") else f" # matrix value {value}"
    return cmd


def collect(run_tag: str, results_root: Path | str | None = None, notebooks_dir: Path | str | None = None):
    """Every record of a run and the status of every stage.

    Parameters
    ----------
    run_tag : str
    results_root : path, optional
        Defaults to ``$MAGS_RESULTS`` or ``<project>/results``.
    notebooks_dir : path, optional
        The notebooks whose stages are expected (default ``<project>/notebooks``).

    Returns
    -------
    records : pandas.DataFrame
        One row per record, with its ``stage``.
    status : pandas.DataFrame
        One row per expected stage (and per stage found on disk): ``status`` (done / skipped /
        failed / missing / no metrics), ``reason``, ``wall_time_s``, ``peak_mem_mb``,
        ``n_records``, ``command``.
    info : dict
        ``run_tag``, ``profile``, ``git_sha``, ``machine``, ``date`` of the run.
    """
    import pandas as pd
    from mags_lib import pipeline

    root = Path(results_root) if results_root is not None else pipeline.default_results_root()
    run = root / run_tag
    state_path = run / "pipeline.json"
    try:
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{state_path} is not valid JSON ({exc}): the pipeline's state of run {run_tag!r} "
                         "is damaged; run the pipeline again, or move the file away") from None
    runs = state.get("notebooks", {}) if isinstance(state, dict) else None
    if not isinstance(runs, dict) or not all(isinstance(r, dict) for r in runs.values()):
        raise ValueError(f"{state_path} is not a pipeline state file (its 'notebooks' must map each run to a "
                         "record)")
    stages = _expected_stages(Path(notebooks_dir) if notebooks_dir else None)
    found = sorted(str(p.parent.relative_to(run)) for p in run.glob("*/**/metrics.json")) if run.is_dir() else []
    found = [s for s in found if _STAGE_RE.match(s.split("/")[0]) and not s.startswith("90_")
             and s.count("/") <= 1 and not s.endswith("/before")]
    stages += [s for s in found if s not in stages]
    stages.sort(key=lambda s: s.split("/")[0])  # stable: keeps matrix order within a notebook
    rec_rows, rows = [], []
    for stage in stages:
        pr = runs.get(stage, {})
        mpath = run / stage / "metrics.json"
        row = {"stage": stage, "status": "missing", "reason": None, "wall_time_s": pr.get("wall_time_s"),
               "peak_mem_mb": pr.get("peak_mem_mb"), "n_records": 0,
               "command": _run_command(stage, run_tag, state.get("profile"))}
        stale = " (the metrics.json there is an earlier run's: left out)" if mpath.exists() else ""
        if pr.get("status") == "failed":
            err = pr.get("error") or {}
            row.update(status="failed", reason=(f"{err.get('ename')}: {err.get('evalue')} (cell {err.get('cell_index')})"
                                                if isinstance(err, dict) and err else "failed (see pipeline.json)"))
        elif pr.get("status") == "interrupted":  # a rerun stopped part-way: what is on disk is not this run's
            row["reason"] = (f"interrupted: stopped before the notebook finished (started {pr.get('started_at')})"
                             f"{stale}; run it again")
        elif pr.get("status") == "running":
            row["reason"] = (f"interrupted: its runner (pid {pr['runner']['pid']}) stopped before the notebook "
                             f"finished (started {pr.get('started_at')}){stale}; run it again" if _runner_gone(pr)
                             else f"running now (started {pr.get('started_at')}){stale}")
        elif mpath.exists():
            foreign = _foreign_reason(run / stage / "meta.json", run_tag, state.get("profile"))
            try:
                doc = read_metrics(mpath)
            except (ValueError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
                row.update(status="failed", reason=f"unreadable metrics.json: {e}")
            else:
                if foreign:  # e.g. the notebook run by hand with profile = "smoke" into this run's folder
                    row["reason"] = f"{foreign}; its {len(doc['records'])} record(s) left out; run it again"
                else:
                    skip = _skip_reason(doc)
                    row.update(status="skipped" if skip and not doc["records"] else "done", reason=skip,
                               n_records=len(doc["records"]))
                    rec_rows += [{"stage": stage, **r} for r in doc["records"]]
        elif stage in NO_METRICS and (pr.get("status") == "done" or (run / stage / "meta.json").exists()):
            row.update(status="no metrics", reason=NO_METRICS[stage])
        elif pr.get("status"):
            row["reason"] = f"pipeline status {pr['status']!r}, no metrics.json"
        rows.append(row)
    records = pd.DataFrame(rec_rows, columns=["stage", *RECORD_KEYS])
    status = pd.DataFrame(rows, columns=["stage", "status", "reason", "wall_time_s", "peak_mem_mb",
                                         "n_records", "command"])
    return records, status, run_info(run, state)


def _foreign_reason(meta_path: Path, run_tag: str, profile: str | None) -> str | None:
    """Why the stage's outputs are not this run's, from the parameters its ``meta.json`` records: another
    profile (a notebook run by hand in JupyterLab with ``profile = "smoke"`` writes into
    ``results/<run_tag>/`` like any run) or another run tag (a folder copied from another run). ``None``
    when they agree or cannot be told (no meta.json, no parameters)."""
    try:
        params = json.loads(meta_path.read_text()).get("params") if meta_path.exists() else None
    except (json.JSONDecodeError, OSError, AttributeError):
        return None
    if not isinstance(params, Mapping):
        return None
    if profile and params.get("profile") and str(params["profile"]) != str(profile):
        return (f"its outputs are from a {params['profile']!r} run (meta.json), not this {profile!r} run "
                f"{run_tag!r}")
    if params.get("run_tag") and str(params["run_tag"]) != run_tag:
        return f"its outputs are from run tag {params['run_tag']!r} (meta.json), not {run_tag!r}"
    return None


def _runner_gone(record: Mapping) -> bool:
    """True when a stage marked running was started on this machine by a process that no longer
    exists (killed, or the machine restarted): it will never finish. False when unknown (another
    machine, or a record written before runners were recorded)."""
    from mags_lib import pipeline

    return pipeline.runner_exists(record) is False


def run_info(run: Path, state: Mapping | None = None) -> dict:
    """SHA, machine, date and profile of a run, from ``pipeline.json`` and its stages' ``meta.json``."""
    state = state or {}
    metas = []
    for p in sorted(run.glob("*/**/meta.json")) if run.is_dir() else []:
        try:
            metas.append(json.loads(p.read_text()))
        except json.JSONDecodeError:
            continue
    shas = sorted({m.get("git_sha") for m in metas if m.get("git_sha")})
    dates = sorted(m.get("written_at") for m in metas if m.get("written_at"))
    cpus = sorted({m.get("cpu_count") for m in metas if m.get("cpu_count")})
    plats = sorted({m.get("platform") for m in metas if m.get("platform")})
    profiles = sorted({str(m.get("params", {}).get("profile")) for m in metas if m.get("params", {}).get("profile")})
    return {"run_tag": run.name, "profile": state.get("profile") or (", ".join(profiles) or None),
            "git_sha": ", ".join(shas) or None,
            "machine": (f"{', '.join(map(str, cpus))} CPU(s), {', '.join(plats)}" if cpus else None),
            "date": (f"{dates[0]} .. {dates[-1]}" if dates else state.get("created"))}


# ------------------------------------------------------------------------------------------------
# the README block
def report_data(run_tag: str, results_root: Path | str | None = None,
                notebooks_dir: Path | str | None = None) -> dict:
    """What ``reports/<run_tag>.json`` holds: info, stage status, headline records (the expected
    stages are the notebooks of ``notebooks_dir``, default ``<project>/notebooks``)."""
    records, status, info = collect(run_tag, results_root, notebooks_dir)
    clean = lambda df: json.loads(df.to_json(orient="records"))  # NaN -> null  # noqa: E731
    recs = clean(records)
    for r in recs:  # a column holding a null is float in pandas: 100 would reach the report as 100.0
        if r["n"] is not None:
            r["n"] = int(r["n"])
        validate_record({k: r[k] for k in RECORD_KEYS}, f"{r['stage']} record")
    return {"format": FORMAT, **info, "status": clean(status), "records": recs}


def _fmt(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def sections(data: Mapping) -> list[dict]:
    """The report's sections from :func:`report_data`'s dict, in order.

    Each is ``{"title", "sources", "notes", "records"}``: the notebooks it shows, one line per stage
    that is missing / failed / skipped / without metrics, and its records (speed: every record in
    seconds or tokens/s, which the other sections leave out).
    """
    status = {s["stage"]: s for s in data["status"]}
    out = []
    for title, nbs in [*SECTIONS.items(), ("speed", ())]:
        in_section = (lambda st: st.split("/")[0] in nbs)
        notes = []
        for st, s in status.items():
            if not nbs or not in_section(st):
                continue
            if s["status"] in ("missing", "failed"):
                notes.append(f"{s['status']}: {st} — run `{s['command']}`")
            elif s["status"] in ("skipped", "no metrics"):
                notes.append(f"{s['status']}: {st} — {s['reason']}")
        recs = [r for r in data["records"]
                if (r["unit"] in SPEED_UNITS) == (not nbs) and (not nbs or in_section(r["stage"]))]
        out.append({"title": title, "sources": [f"notebooks/{n}.ipynb" for n in nbs], "notes": notes,
                    "records": recs})
    return out


def render_markdown(data: Mapping) -> str:
    """The run's stage table and one markdown table per section (deterministic)."""
    lines = [f"Run `{data['run_tag']}` (profile {data.get('profile') or '–'}), git {data.get('git_sha') or '–'}, "
             f"machine {data.get('machine') or '–'}, date {data.get('date') or '–'}.", "",
             "| stage | status | wall time (s) | peak memory (MiB) | records |", "| --- | --- | ---: | ---: | ---: |"]
    for s in data["status"]:
        st = s["status"] + (f": {s['reason']}" if s.get("reason") and s["status"] != "done" else "")
        lines.append(f"| {s['stage']} | {st} | {_fmt(s.get('wall_time_s'))} | {_fmt(s.get('peak_mem_mb'))} "
                     f"| {s['n_records']} |")
    for sec in sections(data):
        src = ", ".join(f"`{x}`" for x in sec["sources"]) or "every record in seconds or tokens/s"
        lines += ["", f"**{sec['title']}** — {src}", ""]
        lines += [f"- {note}" for note in sec["notes"]]
        if sec["records"]:
            if sec["notes"]:
                lines.append("")
            lines += ["| stage | record | value | unit | n | 95 % interval |", "| --- | --- | ---: | --- | ---: | --- |"]
            for r in sec["records"]:
                iv = f"[{_fmt(r['interval'][0])}, {_fmt(r['interval'][1])}]" if r.get("interval") else "–"
                lines.append(f"| {r['stage']} | {r['name']} | {_fmt(r['value'])} | {r['unit']} | {_fmt(r.get('n'))} | {iv} |")
        elif not sec["notes"]:
            lines.append("- no records")
    return "\n".join(lines)


def render_readme_block(data: Mapping) -> str:
    """The README's results block (markers included) from ``reports/<run_tag>.json``'s dict."""
    return "\n".join([README_BEGIN,
                      f"<!-- generated by `python -m mags_lib.results readme --run-tag {data['run_tag']}` from "
                      f"reports/{data['run_tag']}.json; do not edit by hand -->", "",
                      render_markdown(data), README_END])


def plot_training(data: Mapping, ax=None):
    """Bars of each role's primary held-out metric (first set, free mode) per stage: base, sft, grpo."""
    import matplotlib.pyplot as plt
    primary = {"ask": "op_f1", "write": "op_f1", "answer": "accuracy"}
    rows = []
    for r in data["records"]:
        parts = r["name"].split(" ")
        if r["stage"].startswith("20_") and len(parts) == 5 and parts[3] == "free" and primary.get(parts[0]) == parts[4]:
            rows.append((parts[0], parts[2], parts[1], r["value"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    firsts = {}
    for role, set_, stage, v in rows:
        firsts.setdefault(role, set_)
    keep = [(role, stage, v) for role, set_, stage, v in rows if firsts[role] == set_ and v is not None]
    stages = ["base", "sft", "grpo"]
    roles = list(dict.fromkeys(k[0] for k in keep))
    for j, stage in enumerate(stages):
        xs = [i + (j - 1) * 0.27 for i, role in enumerate(roles)]
        ys = [next((v for ro, st, v in keep if ro == role and st == stage), float("nan")) for role in roles]
        ax.bar(xs, ys, width=0.27, label=stage)
    ax.set_xticks(range(len(roles)), [f"{ro}\n{primary[ro]}, {firsts[ro]}" for ro in roles])
    ax.set_ylim(0, 1)
    ax.set_title("training: held-out metric before / after" if roles else "training: no records")
    ax.legend()
    return ax


def plot_intervals(data: Mapping, stage: str, unit: str = "accuracy", ax=None):
    """Points with 95 % interval bars for one stage's records of one unit (game, ablations)."""
    import matplotlib.pyplot as plt
    recs = [r for r in data["records"] if r["stage"] == stage and r["unit"] == unit and r["value"] is not None]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    for i, r in enumerate(recs):
        lo, hi = r["interval"] or (r["value"], r["value"])
        ax.errorbar([i], [r["value"]], yerr=[[r["value"] - lo], [hi - r["value"]]], fmt="o", capsize=4)
    ax.set_xticks(range(len(recs)), [r["name"] for r in recs], rotation=30, ha="right")
    ax.set_ylabel(unit)
    ax.set_title(f"{stage}: {unit} with 95 % intervals" if recs else f"{stage}: no records")
    return ax


def _split_readme(text: str, path: Path) -> tuple[str, str, str]:
    if text.count(README_BEGIN) != 1 or text.count(README_END) != 1 or text.index(README_BEGIN) > text.index(README_END):
        raise ValueError(f"{path} must hold exactly one {README_BEGIN} ... {README_END} block "
                         f"(inside its '## Results' section)")
    head, rest = text.split(README_BEGIN)
    block, tail = rest.split(README_END)
    return head, README_BEGIN + block + README_END, tail


def update_readme(readme: Path | str, data: Mapping, *, check: bool = False) -> str:
    """Rewrite (or, with ``check``, compare) the README block; returns the diff ('' when equal)."""
    readme = Path(readme)
    raw = readme.read_bytes().decode("utf-8")
    crlf = "\r\n" in raw  # a README with Windows line ends keeps them, inside the block and out
    head, old, tail = _split_readme(raw.replace("\r\n", "\n"), readme)
    new = render_readme_block(data)
    diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        f"{readme} (committed)", "rendered from the report"))
    if diff and not check:
        text = head + new + tail
        repro.atomic_write_text(readme, text.replace("\n", "\r\n") if crlf else text)
    return diff


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(prog="python -m mags_lib.results", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("readme", help="write reports/<run_tag>.json and the README results block")
    r.add_argument("--run-tag", default="default")
    r.add_argument("--results-root", default=None)
    r.add_argument("--readme", default=str(root / "README.md"))
    r.add_argument("--reports-dir", default=str(root / "reports"))
    r.add_argument("--check", action="store_true",
                   help="only compare the README block with reports/<run_tag>.json; exit 1 with a diff")
    a = p.parse_args(argv)
    try:
        return _readme_command(a)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        what = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.filename else str(exc)
        print(f"error: {what}", file=sys.stderr)
        return 2


def _readme_command(a: argparse.Namespace) -> int:
    from mags_lib import pipeline

    try:
        pipeline._check_run_tag(a.run_tag)
    except pipeline.PipelineError as exc:
        raise ValueError(str(exc)) from None
    report = Path(a.reports_dir) / f"{a.run_tag}.json"
    _split_readme(Path(a.readme).read_text(), Path(a.readme))  # its block exists before anything is written
    if a.check:
        if not report.exists():
            print(f"no {report}: make it with python -m mags_lib.results readme --run-tag {a.run_tag}", file=sys.stderr)
            return 2
        try:
            data = json.loads(report.read_text())
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format') if isinstance(data, dict) else type(data).__name__!r}")
            render_readme_block(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{report} is not a report of python -m mags_lib.results ({exc}); make it again with "
                             f"python -m mags_lib.results readme --run-tag {a.run_tag}") from None
        diff = update_readme(a.readme, data, check=True)
        if diff:
            print(f"{a.readme}: results block differs from {report}; regenerate it with "
                  f"python -m mags_lib.results readme --run-tag {a.run_tag}\n{diff}", file=sys.stderr)
            return 1
        print(f"{a.readme}: results block matches {report}")
        return 0
    data = report_data(a.run_tag, a.results_root)
    run = (Path(a.results_root) if a.results_root is not None else pipeline.default_results_root()) / a.run_tag
    if not any(s["status"] != "missing" for s in data["status"]):  # a typo'd tag, or a fresh clone's empty results
        raise ValueError(f"run {a.run_tag!r} has no results at {run} (no stage finished, failed or was skipped), so "
                         f"{report} and the README block are left as they are; run the pipeline first "
                         f"(bash scripts/main.sh --run-tag {a.run_tag}), or check the committed block with --check")
    repro.atomic_write_text(report, json.dumps(data, indent=1) + "\n")
    update_readme(a.readme, data)
    print(f"wrote {report} ({len(data['records'])} records, {len(data['status'])} stages) and {a.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
