"""Operation quality of a memory against the generator's ground truth.

:func:`operation_quality` compares the facts and entities a :class:`~mags_lib.graph.LiquidGraph`
holds after a scenario with the scenario's gold facts (which fact was stated, and which was
superseded by a newer value) and gold entities. It counts:

* **wrong invalidations** -- memory facts invalidated (superseded or rejected) that match a gold
  fact that still holds; rate over all invalidated memory facts;
* **missed invalidations** -- superseded gold facts that some *valid* memory fact still matches;
  rate over the superseded gold facts that memory stored at all (valid or not);
* **duplicate entities** -- for each gold entity, the live entity nodes that match it beyond the
  first; rate over the gold entities that have at least one node;
* **wrong subject** -- memory facts whose relation and object match a gold fact but whose subject
  node matches none of the gold facts having that relation and object (e.g. a persona fact stored
  under ``"I"`` instead of the speaker); rate over the memory facts that match gold at all.

The memory facts are the ones the graph holds at the end (valid and invalidated) and, given
``removed`` (what :meth:`LiquidGraph.record_removed_facts` collected while the scenario played), the
ones maintenance removed before the end, each in its state when it went: an invalidation that was
pruned later still counts (right or wrong), a gold fact stored and then forgotten still counts as
stored. A fact forgotten while still valid no longer asserts the old value, so it is not a missed
invalidation (``n_removed`` counts the removed facts scored).

Matching rule (texts normalised with :func:`mags_lib.game.score.normalize`; ``key`` also drops a
stand-alone possessive ``s`` and a plural ``s``; cosines from the graph's own embedder, MiniLM in
real runs):

* a node **is** gold entity E when one of its texts (text and aliases) has the key of E's name
  or of E's invented word, or a cosine >= :data:`ENTITY_SIM` with E's name;
* two **objects** match when their keys are equal, one occurs in the other as a whole-word run, or
  their cosine is >= :data:`OBJECT_SIM`; when either holds a number, the numbers must be equal
  (numbers are typed values: "45 points" never matches "50 points");
* a memory fact matches gold fact G when the objects match and the relations are equal after
  normalisation or ``"relation object"`` of both has a cosine >= :data:`FACT_SIM` (the op-F1
  threshold); among several candidates the one whose subject matches wins, then the closest object.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ..metrics import SIM_THRESHOLD
from .scenario import Scenario
from .score import contains_run, normalize

__all__ = ["ENTITY_SIM", "FACT_SIM", "OBJECT_SIM", "QUALITY_COUNTS", "operation_quality", "quality_rates"]

ENTITY_SIM = 0.85
OBJECT_SIM = 0.9
FACT_SIM = SIM_THRESHOLD

QUALITY_COUNTS = ("n_memory_facts", "n_matched", "n_wrong_subject", "n_unmatched", "n_invalidated",
                  "n_correct_invalidations", "n_wrong_invalidations", "n_gold", "n_gold_stored",
                  "n_superseded", "n_superseded_stored", "n_missed_invalidations", "n_gold_entities",
                  "n_entities_present", "n_entity_nodes", "n_duplicate_entities", "n_memory_matched_any",
                  "n_removed")
"""Counts :func:`operation_quality` returns; they add up over scenarios (:func:`quality_rates`)."""

_NUM_WORDS = {w: str(i) for i, w in enumerate(
    ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"))}
_NUM_WORDS.update({"fifteen": "15", "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60"})
_NUM = re.compile(r"^\d+$")


def _key(text: str) -> str:
    words = [w for w in normalize(text).split() if w != "s"]
    return " ".join(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words)


def _numbers(text: str) -> tuple[str, ...]:
    return tuple(_NUM_WORDS.get(w, w) for w in normalize(text).split() if _NUM.match(_NUM_WORDS.get(w, w)))


class _Cos:
    """Cosines between texts, each text encoded once."""

    def __init__(self, embedder, texts: Sequence[str]):
        uniq = list(dict.fromkeys(texts))
        self.row = {t: i for i, t in enumerate(uniq)}
        self.vecs = np.asarray(embedder.encode(uniq), dtype=np.float32) if uniq else np.zeros((0, 1))

    def __call__(self, a: str, b: str) -> float:
        return float(self.vecs[self.row[a]] @ self.vecs[self.row[b]])


def _objects_match(a: str, b: str, cos: _Cos) -> float:
    """0 when the objects do not match, else a closeness in (0, 2] (2: same key)."""
    if _numbers(a) != _numbers(b):
        return 0.0
    if _key(a) == _key(b):
        return 2.0
    if contains_run(a, b) or contains_run(b, a):
        return 1.5
    c = cos(a, b)
    return c if c >= OBJECT_SIM else 0.0


def quality_rates(counts: dict) -> dict:
    """The four rates (and the stored share) from summed counts; None where the denominator is 0."""
    def rate(num, den):
        return None if not counts.get(den) else counts[num] / counts[den]

    return {
        "wrong_invalidation_rate": rate("n_wrong_invalidations", "n_invalidated"),
        "missed_invalidation_rate": rate("n_missed_invalidations", "n_superseded_stored"),
        "duplicate_entity_rate": rate("n_duplicate_entities", "n_entities_present"),
        "wrong_subject_rate": rate("n_wrong_subject", "n_memory_matched_any"),
        "stored_rate": rate("n_gold_stored", "n_gold"),
    }


def operation_quality(graph, scenario: Scenario, *, embedder=None, details: bool = False,
                      removed: Sequence[dict] = ()) -> dict:
    """Operation quality of ``graph`` against ``scenario``'s ground truth.

    Parameters
    ----------
    graph : LiquidGraph
        The memory after the scenario (``m.graph``).
    scenario : Scenario
        With ``gold`` facts and ``entities`` (generated scenarios have them).
    embedder : Embedder, optional
        For the similarity rules (default: the graph's own embedder).
    details : bool
        Also return ``"facts"`` (every memory fact with its status and gold match: ``gold`` as text,
        ``gold_index`` into ``scenario.gold``, ``removed``: maintenance removed it before the end) and
        ``"entities"`` (gold entity -> matching node texts).
    removed : sequence of dict
        The fact edges removed from ``graph`` while the scenario played, as
        :meth:`~mags_lib.graph.LiquidGraph.record_removed_facts` collected them: scored in their state
        when they went (one whose id the graph still holds -- a rollback brought it back -- is scored
        once, as the graph holds it; of an id removed twice, the last record).

    Returns
    -------
    dict
        The counts of :data:`QUALITY_COUNTS` and the rates of
        :func:`quality_rates`.

    Raises
    ------
    ValueError
        When the scenario has no ground truth.
    """
    if not scenario.gold:
        raise ValueError(f"scenario {scenario.name!r} has no ground truth (gold facts): operation quality "
                         "needs a generated scenario")
    emb = embedder if embedder is not None else graph.embedder
    gold = scenario.gold
    ents = {e.name: e for e in scenario.entities}
    mem = graph.facts(include_invalid=True)
    held = {f["id"] for f in mem}
    gone: dict[int, dict] = {}
    for f in removed:
        if not isinstance(f, dict) or not {"id", "subject", "relation", "object", "src", "valid"} <= f.keys():
            raise ValueError("removed must hold fact dicts as LiquidGraph.record_removed_facts() collects them "
                             f"(id, subject, relation, object, src, valid), got {f!r:.120}")
        if f["id"] not in held:
            gone[f["id"]] = f
    mem = mem + [{**f, "removed": True} for f in gone.values()]
    nodes = {}
    for nid, d in graph.to_networkx().nodes(data=True):
        if d["block"] == "semantic":
            nodes[nid] = list(dict.fromkeys([d["text"]] + list(d["aliases"])))
    texts: list[str] = [e.name for e in scenario.entities]
    texts += [t for ts in nodes.values() for t in ts]
    texts += [f["subject"] for f in mem] + [f["object"] for f in mem] + [g.object for g in gold]
    texts += [f"{f['relation']} {f['object']}" for f in mem] + [f"{g.relation} {g.object}" for g in gold]
    texts += [g.subject for g in gold]
    cos = _Cos(emb, texts)

    def is_entity(node_texts: Sequence[str], name: str) -> bool:
        e = ents.get(name)
        keys = {_key(name)} | ({_key(e.core)} if e is not None else set())
        return any(_key(t) in keys or cos(t, name) >= ENTITY_SIM for t in node_texts)

    node_texts = nodes
    rows = []
    matched_gold: dict[int, list[dict]] = {}
    c = dict.fromkeys(QUALITY_COUNTS, 0)
    for f in mem:
        subj_texts = node_texts.get(f["src"], [f["subject"]])
        cands = []
        for gi, g in enumerate(gold):
            close = _objects_match(f["object"], g.object, cos)
            if not close:
                continue
            if normalize(f["relation"]) != normalize(g.relation) and \
                    cos(f"{f['relation']} {f['object']}", f"{g.relation} {g.object}") < FACT_SIM:
                continue
            cands.append((is_entity(subj_texts, g.subject), close, -gi, gi))
        status, gi = "unmatched", None
        if cands:
            ok, _, _, gi = max(cands)
            status = "matched" if ok else "wrong_subject"
            c["n_memory_matched_any"] += 1
        c["n_memory_facts"] += 1
        c["n_removed"] += bool(f.get("removed"))
        c["n_" + status] += 1
        if status == "matched":
            matched_gold.setdefault(gi, []).append(f)
        if not f["valid"]:
            c["n_invalidated"] += 1
            if status == "matched":
                c["n_correct_invalidations" if gold[gi].superseded is not None else "n_wrong_invalidations"] += 1
        if details:
            g = gold[gi] if gi is not None else None
            rows.append({"subject": f["subject"], "relation": f["relation"], "object": f["object"],
                         "valid": f["valid"], "removed": bool(f.get("removed")), "status": status,
                         "gold": None if g is None else f"{g.subject} | {g.relation} | {g.object}",
                         "gold_index": gi,
                         "gold_holds": None if g is None else g.superseded is None})
    c["n_gold"] = len(gold)
    c["n_gold_stored"] = len(matched_gold)
    for gi, g in enumerate(gold):
        if g.superseded is None:
            continue
        c["n_superseded"] += 1
        if gi in matched_gold:
            c["n_superseded_stored"] += 1
            if any(f["valid"] and not f.get("removed") for f in matched_gold[gi]):
                c["n_missed_invalidations"] += 1
    ent_rows = {}
    for e in scenario.entities:
        hits = [ts[0] for ts in node_texts.values() if is_entity(ts, e.name)]
        c["n_gold_entities"] += 1
        c["n_entity_nodes"] += len(hits)
        if hits:
            c["n_entities_present"] += 1
            c["n_duplicate_entities"] += len(hits) - 1
        ent_rows[e.name] = hits
    out = {**c, **quality_rates(c)}
    if details:
        out["facts"] = rows
        out["entities"] = ent_rows
    return out
