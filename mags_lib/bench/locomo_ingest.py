"""What ingesting a LoCoMo conversation with a write model costs: seconds per turn, and what it wrote.

Usage::

    python -m mags_lib.bench.locomo_ingest --write-model models/write/default/gguf/lora-f32.gguf \\
        --conversation conv-30 --threads 1 --mode observe --out results/bench/locomo_ingest_t1.json
    python -m mags_lib.bench.locomo_ingest ... --mode many --n-parallel 8 --threads 2 \\
        --compare results/bench/locomo_ingest_t1.json

``--mode observe`` stores the turns one :meth:`MAGS.observe` call each (as ``locomo_eval`` does); ``many``
one :meth:`MAGS.observe_many` call per session (its write-model calls batched, decoded ``--n-parallel``
prompts at a time by the llama.cpp backend). The time covers everything a turn costs (write model,
embedding, the graph, the periodic ``maintain``); one warm-up turn loads the models first. The JSON keeps
the figures and one hash per turn of the triplets written (never LoCoMo's text: the data is CC BY-NC), so
two runs -- another mode, thread count or checkout -- can be compared turn by turn (``--compare``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["compare", "ingest", "main"]

MODES = ("observe", "many")


def _turn_hash(triplets: Sequence[Sequence[str]]) -> str:
    return hashlib.sha256(json.dumps([list(t) for t in triplets]).encode()).hexdigest()[:16]


def ingest(conv: Any, *, write_model: str | None = None, threads: int = 1, mode: str = "observe",
           n_parallel: int = 1, seed: int = 0, write_speaker: bool = True) -> dict:
    """Store every turn of ``conv`` (a :class:`mags_lib.bench.locomo.Conversation`) in a fresh MAGS whose write
    role runs ``write_model`` (None: the embedded base model) on llama.cpp; figures and per-turn hashes.

    ``subjects`` counts the stored triplets by subject: the turn's speaker, the other person of the
    conversation, anything else (``write_speaker``: :attr:`MAGSConfig.write_speaker`)."""
    from ..agent import MAGS, MAGSConfig
    from .locomo_eval import _iso

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    kw: dict = {"backend_kwargs": {"n_parallel": int(n_parallel)}} if n_parallel != 1 else {}
    people = {t.speaker for s in conv.sessions for t in s.turns}
    subjects = {"speaker": 0, "other_speaker": 0, "other": 0}
    with MAGS(MAGSConfig(write_model=write_model, n_threads=threads, seed=seed, write_speaker=write_speaker,
                         **kw)) as m:
        m.observe("Warm-up: the kettle is blue.", source="warmup")  # loads the write model and the embedder
        hashes: list[str] = []
        n_triplets = 0
        t0 = time.perf_counter()
        for s in conv.sessions:
            items = [{"text": t.utterance(), "source": t.dia_id, "time": _iso(t), "speaker": t.speaker}
                     for t in s.turns]
            obs = [m.observe(**x) for x in items] if mode == "observe" else m.observe_many(items, progress=False)
            for o in obs:
                hashes.append(_turn_hash(o.triplets))
                n_triplets += len(o.triplets)
                for t in o.triplets:
                    subjects["speaker" if t[0] == o.speaker else "other_speaker" if t[0] in people else "other"] += 1
        secs = time.perf_counter() - t0
        stats = m.graph.stats()
    return {"conversation": conv.sample_id, "mode": mode, "threads": threads, "n_parallel": n_parallel,
            "write_model": write_model or "embedded base", "write_speaker": write_speaker, "turns": len(hashes),
            "seconds": round(secs, 2), "seconds_per_turn": round(secs / max(1, len(hashes)), 4),
            "triplets": n_triplets, "subjects": subjects,
            "facts": stats["n_facts"], "invalidated": stats["n_invalidated"], "turn_hashes": hashes}


def compare(a: dict, b: dict) -> dict:
    """Turn-by-turn agreement of two runs on one conversation, and how many times faster ``b`` ran than ``a``."""
    if a["conversation"] != b["conversation"] or len(a["turn_hashes"]) != len(b["turn_hashes"]):
        raise ValueError("the two runs are not of the same conversation")
    same = sum(x == y for x, y in zip(a["turn_hashes"], b["turn_hashes"]))
    return {"turns_equal": same, "turns": len(a["turn_hashes"]), "share_equal": round(same / len(a["turn_hashes"]), 4),
            "speedup": round(a["seconds_per_turn"] / b["seconds_per_turn"], 3) if b["seconds_per_turn"] else None}


def main(argv: Sequence[str] | None = None) -> int:
    from .. import repro
    from .locomo import load_locomo

    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.locomo_ingest", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="path of locomo10.json (default ../shared/data/locomo/)")
    p.add_argument("--conversation", default="conv-30")
    p.add_argument("--write-model", default=None, help="a GGUF (model or LoRA adapter); default: the embedded base")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mode", choices=MODES, default="observe")
    p.add_argument("--n-parallel", type=int, default=1, help="prompts decoded together (llama.cpp backend)")
    p.add_argument("--no-write-speaker", action="store_true",
                   help="the write model reads the turn's text alone (MAGSConfig.write_speaker=False)")
    p.add_argument("--compare", default=None, help="an earlier run's JSON: turn-by-turn agreement and speed ratio")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.threads < 1 or a.n_parallel < 1:
        p.error("--threads and --n-parallel must be >= 1")
    data = load_locomo(a.data)
    conv = next((c for c in data.conversations if c.sample_id == a.conversation), None)
    if conv is None:
        p.error(f"no conversation {a.conversation!r}; the file has {[c.sample_id for c in data.conversations]}")
    earlier = None
    if a.compare:  # checked before the (long) ingestion, never after it
        try:
            earlier = json.loads(Path(a.compare).read_text())
            ok = (isinstance(earlier, dict) and isinstance(earlier.get("turn_hashes"), list)
                  and "seconds_per_turn" in earlier)
        except (OSError, ValueError) as e:
            p.error(f"--compare {a.compare}: cannot read it as an earlier run's JSON ({e}); pass the --out file "
                    "of an earlier run of this command")
        if not ok:
            p.error(f"--compare {a.compare}: not an earlier run of this command (no turn_hashes / seconds_per_turn)")
        if earlier.get("conversation") != conv.sample_id or len(earlier["turn_hashes"]) != conv.n_turns:
            p.error(f"--compare {a.compare} is a run of {earlier.get('conversation')!r} "
                    f"({len(earlier['turn_hashes'])} turns), not of {conv.sample_id!r} ({conv.n_turns} turns)")
    load_before = os.getloadavg()
    res = ingest(conv, write_model=a.write_model, threads=a.threads, mode=a.mode, n_parallel=a.n_parallel,
                 write_speaker=not a.no_write_speaker)
    if earlier is not None:
        res["compared_with"] = {"file": a.compare, **compare(earlier, res)}
    res["meta"] = {"git_sha": repro.git_sha(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
                   "load_average_before": [round(x, 2) for x in load_before],
                   "load_average_after": [round(x, 2) for x in os.getloadavg()],
                   "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    repro.atomic_write_text(Path(a.out), json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k not in ("turn_hashes", "meta")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
