"""Import the seed project's ask/write datasets (``seed_syn_dual/{asks,writes}/*.json``).

Each file is ``{"examples": [{"input", "response", "id"?}, ...]}``. Responses are parsed with
:func:`mags_lib.protocol.parse` in strict mode for the folder's role; examples that do not parse are
left out and reported with the parser's reasons. The raw files are only read, never modified.

Ids and split
-------------
Ids repeat across files (``d1.json`` and ``d2.json`` both start at 1) and two files have none, so
every example gets a stable id ``"<folder>/<file stem>:<id>"`` or, without an id,
``"<folder>/<file stem>#<index>"``. The split is a deterministic function of that id alone: the
example goes to ``test`` when ``sha256(id) mod 10_000 < test_fraction * 10_000`` (about 10 %),
independent of file order or any shuffling.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import protocol

__all__ = ["DEFAULT_SEED_PATH", "ROLE_DIRS", "SeedImport", "import_seed", "resolve_seed_path", "split_of"]

ROLE_DIRS = {"asks": "ask", "writes": "write"}
# DESIGN.md's location, relative to the project root (``../shared/data/seed_syn_dual``).
DEFAULT_SEED_PATH = "../shared/data/seed_syn_dual"


def resolve_seed_path(path: str | Path = DEFAULT_SEED_PATH) -> Path:
    """``path`` as given when absolute, else relative to the project root (not the working folder)."""
    from ..models import project_root

    p = Path(path)
    return p if p.is_absolute() else (project_root() / p).resolve()


def split_of(example_id: str, test_fraction: float = 0.1) -> str:
    """``"test"`` or ``"train"`` from a hash of the id (deterministic, order-free).

    >>> split_of("asks/d1:1"), split_of("asks/d1:1")
    ('train', 'train')
    >>> n_test = sum(split_of(f"x#{i}") == "test" for i in range(10_000))
    >>> 900 < n_test < 1100   # about 10 %
    True
    """
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    h = int.from_bytes(hashlib.sha256(example_id.encode()).digest()[:8], "big") % 10_000
    return "test" if h < round(test_fraction * 10_000) else "train"


@dataclass
class SeedImport:
    """Rows per role and split, and what was left out (with reasons)."""

    rows: dict[str, dict[str, list[dict]]] = field(default_factory=dict)  # rows[role][split]
    failures: list[dict] = field(default_factory=list)  # {"file", "index", "id", "reasons"}
    files: list[str] = field(default_factory=list)
    duplicate_inputs: int = 0  # examples whose (role, input) already appeared earlier
    dedupe: bool = True  # whether those repeats were dropped (else kept)

    def counts(self) -> dict[str, dict[str, int]]:
        return {role: {s: len(r) for s, r in splits.items()} for role, splits in self.rows.items()}

    def failure_reasons(self) -> dict[str, int]:
        """Number of left-out examples per cause (see :func:`_failure_category`)."""
        out: dict[str, int] = {}
        for f in self.failures:
            out[f["category"]] = out.get(f["category"], 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _failure_category(response: object, reasons: list[str]) -> str:
    text = response if isinstance(response, str) else ""
    if ",contradict>" in text:
        return "'<memory_write,contradict>' tag (a variant outside the protocol)"
    if any("is not subject,relation,object" in r for r in reasons):
        return "write with fewer than three fields"
    first = reasons[0] if reasons else "unknown"
    return first.split("'")[0].split("(")[0].split('"')[0].strip().rstrip(":")


def _ops(parsed: protocol.Parsed) -> list[dict]:
    return [{"role": op.role, "content": op.content, "triplet": list(op.triplet) if op.triplet else []}
            for op in parsed.ops]


def import_seed(path: str | Path = DEFAULT_SEED_PATH, *, test_fraction: float = 0.1,
                dedupe: bool = True) -> SeedImport:
    """Read every ``asks/*.json`` and ``writes/*.json`` under ``path``.

    Parameters
    ----------
    path : str or Path
        Folder holding ``asks/`` and ``writes/`` (the seed's ``seed_syn_dual``); a relative path is
        taken from the project root.
    test_fraction : float
        Share of ids hashed into the test split.
    dedupe : bool
        Drop an example whose input (whitespace and case folded) already appeared for the same role
        (the seed repeats examples across files; repeats would leak between train and test).

    Returns
    -------
    SeedImport

    Raises
    ------
    FileNotFoundError
        When ``path`` or both role folders are missing (the message says what was expected).
    """
    root = resolve_seed_path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"seed dataset folder {root} does not exist: pass the path of "
                                "seed_syn_dual (holding asks/ and writes/)")
    out = SeedImport(rows={role: {"train": [], "test": []} for role in ROLE_DIRS.values()}, dedupe=dedupe)
    found = False
    seen: set[tuple[str, str]] = set()
    for folder, role in ROLE_DIRS.items():
        files = sorted((root / folder).glob("*.json"))
        found = found or bool(files)
        for f in files:
            out.files.append(str(f.relative_to(root)))
            try:
                data = json.loads(f.read_text())
                examples = data["examples"] if isinstance(data, dict) else data
                if not isinstance(examples, list):
                    raise TypeError("'examples' is not a list")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                out.failures.append({"file": str(f.relative_to(root)), "index": None, "id": None,
                                     "reasons": [f"unreadable file: {type(exc).__name__}: {exc}"],
                                     "category": "unreadable file"})
                continue
            for i, ex in enumerate(examples):
                has_id = isinstance(ex, dict) and ex.get("id") is not None
                ex_id = f"{folder}/{f.stem}:{ex['id']}" if has_id else f"{folder}/{f.stem}#{i}"
                reasons = []
                if not isinstance(ex, dict):
                    reasons.append(f"example is {type(ex).__name__}, not an object")
                    ex = {}
                inp, resp = ex.get("input"), ex.get("response")
                if not isinstance(inp, str) or not inp.strip():
                    reasons.append("missing or empty 'input'")
                if not isinstance(resp, str):
                    reasons.append("missing 'response'")
                parsed = protocol.parse(resp if isinstance(resp, str) else "", role=role, mode="strict")
                reasons += parsed.problems
                if reasons:
                    out.failures.append({"file": str(f.relative_to(root)), "index": i, "id": ex_id,
                                         "reasons": reasons, "category": _failure_category(resp, reasons)})
                    continue
                key = (role, " ".join(inp.split()).lower())
                if key in seen:
                    out.duplicate_inputs += 1
                    if dedupe:
                        continue
                seen.add(key)
                out.rows[role][split_of(ex_id, test_fraction)].append({
                    "id": ex_id, "role": role, "kind": f"seed:{f.stem}", "input": inp,
                    "response": protocol.serialize(parsed.ops), "ops": _ops(parsed),
                    "n_ops": len(parsed.ops), "world_id": "", "template_ids": [], "context": [],
                    "gold_facts": [list(t) for t in parsed.triplets], "source": "seed"})
    if not found:
        raise FileNotFoundError(f"no asks/*.json or writes/*.json under {root}: is this seed_syn_dual?")
    return out
