"""The memory a write model builds from the game's generated scenarios, scored against the generator's ground truth.

Usage::

    python -m mags_lib.bench.write_quality --write-model models/write/default/gguf/model-q8_0.gguf \\
        --out results/bench/write_quality.json [--n-scenarios 40] [--threads 2]

Every ``say`` event of the first ``--n-scenarios`` held-out scenarios of the default game profile
(:func:`mags_lib.game.generate.evaluation_scenarios`, examples left out: the scenarios of notebook 50) goes
through :meth:`MAGS.observe` with its source, time and speaker, as :func:`mags_lib.game.run.run_scenario` gives
it; the questions are not asked (no reader is needed, so the write model alone is measured; recall's Hebbian
updates change no fact's validity). Then :func:`mags_lib.game.quality.operation_quality` of the memory: wrong
and missed invalidations, duplicate entities, wrong subjects, gold facts stored -- overall and per rule family,
with every wrongly invalidated fact listed (the fact, the gold fact it matches, the scenario) and every missed
invalidation (the old value memory still holds as valid, the say that changed it, and what memory wrote for the
new value: the form the write model gave the update). Written to
``--out`` (JSON); one line per family printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "missed_invalidations", "observe_scenarios"]


def observe_scenarios(scenarios: Sequence, *, write_model: str | None = None, threads: int = 1,
                      backends: dict | None = None, progress: bool = True, **config: Any) -> dict:
    """Observe every ``say`` of each scenario in a fresh :class:`MAGS` (``config``: more ``MAGSConfig``
    fields) and score its memory: ``{"overall", "families", "wrong_invalidations", "missed_invalidations",
    "n_scenarios", "triplets"}`` (``overall`` / ``families[f]``: summed counts and their rates)."""
    from tqdm.auto import tqdm

    from ..agent import MAGS, MAGSConfig
    from ..game.quality import QUALITY_COUNTS, operation_quality, quality_rates

    overall: Counter = Counter()
    families: dict[str, Counter] = {}
    wrong: list[dict] = []
    missed: list[dict] = []
    n_triplets = 0
    desc = "scenarios" + "".join(f", {k}={v}" for k, v in config.items())
    for sc in tqdm(scenarios, desc=desc, unit="scenario", disable=not progress):
        cfg = MAGSConfig(write_model=write_model, n_threads=threads, **config)
        with MAGS(cfg, backends=backends) as m, m.graph.record_removed_facts() as removed:
            for i, e in enumerate(sc.events):
                if not e.is_ask:
                    n_triplets += len(m.observe(e.text, source=e.source or f"{sc.name}:{i}", time=e.time,
                                                speaker=e.speaker).triplets)
            q = operation_quality(m.graph, sc, details=True, removed=removed)
        counts = {k: q[k] for k in QUALITY_COUNTS}
        overall.update(counts)
        families.setdefault(sc.meta.get("family", "file"), Counter()).update(counts)
        wrong += [{"scenario": sc.name, "fact": [f["subject"], f["relation"], f["object"]], "gold": f["gold"]}
                  for f in q["facts"] if not f["valid"] and f["status"] == "matched" and f["gold_holds"]]
        missed += missed_invalidations(sc, q["facts"])

    def table(c: Counter) -> dict:
        return {"counts": dict(c), "rates": {k: (round(v, 4) if v is not None else None)
                                             for k, v in quality_rates(c).items()}}

    return {"n_scenarios": len(scenarios), "triplets": n_triplets, "overall": table(overall),
            "families": {f: table(c) for f, c in sorted(families.items())}, "wrong_invalidations": wrong,
            "missed_invalidations": missed}


def missed_invalidations(scenario, facts: Sequence[dict]) -> list[dict]:
    """The missed invalidations of one scenario's memory, from ``operation_quality(..., details=True)["facts"]``:
    per superseded gold fact that memory still holds as valid, ``{"scenario", "gold", "still_valid", "update",
    "new_value"}`` -- the old value's valid memory facts, the say that changed it, and the memory facts matched
    to the gold facts that say states about the same subject (``[s, r, o, valid]``; empty: the new value was not
    stored in a form that matches; a row there beside a still-valid old one is a relation or subject the
    conflict rule did not take for the same slot)."""
    by_gold: dict[int, list[dict]] = {}
    for f in facts:
        if f["status"] == "matched":
            by_gold.setdefault(f["gold_index"], []).append(f)
    out = []
    for gi, g in enumerate(scenario.gold):
        valid = [f for f in by_gold.get(gi, []) if f["valid"]]
        if g.superseded is None or not valid:
            continue
        succ = [hi for hi, h in enumerate(scenario.gold) if h.stated == g.superseded and h.subject == g.subject]
        out.append({"scenario": scenario.name, "gold": f"{g.subject} | {g.relation} | {g.object}",
                    "still_valid": [[f["subject"], f["relation"], f["object"]] for f in valid],
                    "update": scenario.events[g.superseded].text,
                    "new_value": [[f["subject"], f["relation"], f["object"], f["valid"]]
                                  for hi in succ for f in by_gold.get(hi, [])]})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from .. import repro
    from ..game.generate import evaluation_scenarios

    p = argparse.ArgumentParser(prog="python -m mags_lib.bench.write_quality", description=__doc__.split("\n\n")[0])
    p.add_argument("--write-model", default=None, help="a GGUF (model or LoRA adapter); default: the embedded base")
    p.add_argument("--n-scenarios", type=int, default=40, help="held-out scenarios of the default game profile")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.n_scenarios < 1 or a.threads < 1:
        p.error("--n-scenarios and --threads must be >= 1")
    scs = evaluation_scenarios("default", n_scenarios=a.n_scenarios, examples=False)
    t0 = time.perf_counter()
    res: dict[str, Any] = {
        "what": "operation quality of the memory the write model builds from the game's held-out generated "
                "scenarios (says observed, questions not asked)",
        "write_model": a.write_model or "embedded base", "threads": a.threads,
        **observe_scenarios(scs, write_model=a.write_model, threads=a.threads)}
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["meta"] = repro.command_meta("mags_lib.bench.write_quality", argv)
    repro.atomic_write_text(Path(a.out), json.dumps(res, indent=1) + "\n")
    for name, t in [("overall", res["overall"]), *res["families"].items()]:
        c, r = t["counts"], t["rates"]
        print(f"{name:>10}: wrong invalidations {c.get('n_wrong_invalidations', 0)} of {c.get('n_invalidated', 0)}, "
              f"missed {c.get('n_missed_invalidations', 0)} of {c.get('n_superseded_stored', 0)}, "
              f"duplicate entities {c.get('n_duplicate_entities', 0)} of {c.get('n_entities_present', 0)}, "
              f"wrong subject {r['wrong_subject_rate']}, stored {r['stored_rate']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
