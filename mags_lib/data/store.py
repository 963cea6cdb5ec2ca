"""Save and load processed datasets: ``data/processed/<name>/`` with a card.

Each dataset folder holds the ``datasets`` ``DatasetDict`` (``save_to_disk``), a ``card.json``
(statistics, generator version, seed, parameters, content hash) and a ``README.md`` rendering the
card for people. Saving is skipped when the folder already holds the same content hash, so
re-running the generation notebook is cheap and never rewrites identical data.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..models import project_root
from .stats import dataset_stats

__all__ = [
    "content_hash",
    "dataset_name",
    "features",
    "load_card",
    "load_processed",
    "processed_root",
    "save_dataset",
    "to_dataset_dict",
]


def features(answer: bool = False):
    """The fixed ``datasets.Features`` schema of a processed dataset (``answer``: with the answer
    role's ``memory`` and ``aliases`` columns, see :mod:`mags_lib.data.answer`)."""
    from datasets import Features, List, Value

    extra = {"memory": List({"text": Value("string"), "time": Value("string"), "current": Value("bool"),
                             "speaker": Value("string"), "until": Value("string")}),
             "aliases": List(Value("string"))} if answer else {}
    return Features({
        "id": Value("string"), "role": Value("string"), "kind": Value("string"), "input": Value("string"),
        "response": Value("string"),
        "ops": List({"role": Value("string"), "content": Value("string"), "triplet": List(Value("string"))}),
        "n_ops": Value("int32"), "world_id": Value("string"), "template_ids": List(Value("string")),
        "context": List(List(Value("string"))), "gold_facts": List(List(Value("string"))),
        "source": Value("string"), **extra,
    })


_COLUMNS = ("id", "role", "kind", "input", "response", "ops", "n_ops", "world_id", "template_ids",
            "context", "gold_facts", "source")
_ANSWER_COLUMNS = ("memory", "aliases")


def _is_answer(splits: dict[str, Sequence[dict]]) -> bool:
    return any(r.get("role") == "answer" for rows in splits.values() for r in rows)


def _columns(splits: dict[str, Sequence[dict]]) -> tuple[str, ...]:
    return _COLUMNS + _ANSWER_COLUMNS if _is_answer(splits) else _COLUMNS


def processed_root(root: Path | str | None = None) -> Path:
    """``<project>/data/processed`` (or ``<root>/data/processed``)."""
    return Path(root) / "data" / "processed" if root is not None else project_root() / "data" / "processed"


def dataset_name(source: str, role: str, profile: str = "default") -> str:
    """Folder name of a processed dataset; non-default profiles get their own folders.

    >>> dataset_name("gen", "ask"), dataset_name("seed", "write", "smoke")
    ('gen_ask', 'seed_write_smoke')
    """
    if source not in ("gen", "seed") or role not in ("ask", "write", "answer") or (source, role) == ("seed", "answer"):
        raise ValueError("source must be 'gen' (roles ask, write, answer) or 'seed' (ask, write), got "
                         f"{source!r}, {role!r}")
    return f"{source}_{role}" if profile == "default" else f"{source}_{role}_{profile}"


def content_hash(splits: dict[str, Sequence[dict]]) -> str:
    """sha256 over the rows of every split (canonical JSON, split names sorted)."""
    h = hashlib.sha256()
    cols = _columns(splits)
    for name in sorted(splits):
        h.update(name.encode())
        for row in splits[name]:
            h.update(json.dumps({k: row[k] for k in cols}, sort_keys=True, ensure_ascii=False).encode())
            h.update(b"\n")
    return h.hexdigest()


def _check_rows(splits: dict[str, Sequence[dict]]) -> None:
    cols = _columns(splits)
    for name, rows in splits.items():
        for i, r in enumerate(rows):
            missing = [c for c in cols if c not in r]
            if missing:
                raise ValueError(f"row {i} of split {name!r} lacks columns {missing}: rows need {list(cols)}")


def to_dataset_dict(splits: dict[str, Sequence[dict]]):
    """A ``datasets.DatasetDict`` with the fixed schema (missing columns raise a clear error)."""
    from datasets import Dataset, DatasetDict

    answer = _is_answer(splits)
    feats = features(answer)
    _check_rows(splits)
    out = {}
    for name, rows in splits.items():
        cols = {c: [r[c] for r in rows] for c in _columns(splits)}
        out[name] = Dataset.from_dict(cols, features=feats)
    return DatasetDict(out)


def _readme(card: dict) -> str:
    lines = [f"# {card['name']}", "", card.get("description", ""), "",
             f"- source: {card['source']}", f"- generator version: {card['generator_version']}",
             f"- seed: {card['seed']}", f"- content hash: `{card['content_hash']}`", "",
             "| split | n | kinds | words/input (mean, p95) | ops/example | empty | distinct-2 | templates |",
             "|---|---|---|---|---|---|---|---|"]
    for split, st in card["statistics"].items():
        if not st.get("n"):
            lines.append(f"| {split} | 0 | | | | | | |")
            continue
        kinds = ", ".join(f"{k} {v}" for k, v in st["kinds"].items())
        lines.append(f"| {split} | {st['n']} | {kinds} | {st['input_words_mean']}, {st['input_words_p95']:.0f} | "
                     f"{st['ops_mean']} | {st['empty_share']:.1%} | {st['distinct_2']} | "
                     f"{st['n_templates_used']} |")
    cols = _COLUMNS + (_ANSWER_COLUMNS if card.get("role") == "answer" else ())
    lines += ["", "Columns: " + ", ".join(f"`{c}`" for c in cols) + ".", "",
              "Parameters:", "", "```json", json.dumps(card.get("params", {}), indent=1, default=str), "```", ""]
    if card.get("notes"):
        lines += ["Notes:", ""] + [f"- {n}" for n in card["notes"]] + [""]
    return "\n".join(lines)


def _complete(out: Path, splits) -> bool:
    """Whether ``out/data`` holds a whole saved ``DatasetDict`` with these splits (not a half-deleted one)."""
    data = out / "data"
    return (data / "dataset_dict.json").is_file() and all((data / s / "state.json").is_file() for s in splits)


def save_dataset(splits: dict[str, Sequence[dict]], name: str, *, source: str, seed: int,
                 generator_version: str, params: dict | None = None, description: str = "",
                 notes: Sequence[str] = (), mask: set[str] | None = None,
                 root: Path | str | None = None) -> Path:
    """Save ``splits`` under ``data/processed/<name>/`` with ``card.json`` and ``README.md``.

    Parameters
    ----------
    splits : dict
        Split name -> list of row dicts (see :mod:`mags_lib.data.render` for the columns).
    name : str
        Folder name (see :func:`dataset_name`).
    source : str
        ``"generated"`` or ``"seed"`` (recorded in the card).
    seed : int
        Seed that produced the data.
    generator_version : str
        Version of the code that produced the data.
    params : dict, optional
        Generation parameters, recorded verbatim.
    mask : set of str, optional
        Invented names masked for the template-diversity statistic.
    root : path, optional
        Project root (defaults to :func:`mags_lib.models.project_root`).

    Returns
    -------
    Path
        The dataset folder. Nothing is rewritten when its card has the same content hash.
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"dataset name must be a plain folder name, got {name!r}")
    _check_rows(splits)
    out = processed_root(root) / name
    digest = content_hash(splits)
    card_path = out / "card.json"
    if card_path.exists():
        try:
            if json.loads(card_path.read_text()).get("content_hash") == digest and _complete(out, splits):
                return out
        except json.JSONDecodeError:
            pass
    card = {"name": name, "description": description, "source": source, "generator_version": generator_version,
            "role": "answer" if _is_answer(splits) else None,
            "seed": seed, "params": params or {}, "content_hash": digest,
            "statistics": dataset_stats(splits, mask), "notes": list(notes)}
    tmp = out.with_name(f".{name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    import datasets

    quiet = not datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        to_dataset_dict(splits).save_to_disk(str(tmp / "data"))
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    (tmp / "card.json").write_text(json.dumps(card, indent=1, default=str))
    (tmp / "README.md").write_text(_readme(card))
    # swap by renames: an interruption leaves either the old or the new folder whole under ``out``, never a
    # half-deleted one (deleting the old folder in place could stop midway, and its card would still match)
    old = out.with_name(f".{name}.old")
    if old.exists():
        shutil.rmtree(old)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def load_card(name: str, root: Path | str | None = None) -> dict:
    """The ``card.json`` of a processed dataset."""
    path = processed_root(root) / name / "card.json"
    if not path.exists():
        raise FileNotFoundError(f"no processed dataset {name!r} at {path.parent}: run "
                                "notebooks/10_generate_datasets.ipynb (or mags_lib.data.build_all) first")
    return json.loads(path.read_text())


def load_processed(name: str, root: Path | str | None = None):
    """Load ``data/processed/<name>/`` as a ``datasets.DatasetDict``.

    Raises
    ------
    FileNotFoundError
        When the dataset was not generated yet (the message says which notebook makes it).
    """
    from datasets import load_from_disk

    path = processed_root(root) / name / "data"
    if not path.exists():
        available = sorted(p.name for p in processed_root(root).glob("*")
                           if (p / "data").exists() and not p.name.startswith("."))
        raise FileNotFoundError(f"no processed dataset {name!r} at {path.parent} (available: {available}): "
                                "run notebooks/10_generate_datasets.ipynb (or mags_lib.data.build_all) first")
    return load_from_disk(str(path))
