"""Engram: write triplets into the Liquid Knowledge Graph.

For a batch of ``(subject, relation, object)`` triplets:

1. **entity resolution** -- each subject/object text is looked up by normalised text, then by
   embedding similarity among live entities (and the entities created earlier in the same batch);
   at or above ``EngramConfig.resolve_threshold`` -- and, with ``typed_resolution``, only when
   :func:`same_kind` allows it (dates, times, numbers and quantities must match exactly; short
   names must share their words, or reach ``short_name_threshold``) -- the existing node is updated (access count,
   alias, importance), otherwise a new node is created in working memory with
   ``surprise = novelty_surprise * (1 - best similarity)`` (novelty; contradictions raise it to
   ``conflict_surprise`` later);
2. **GAT-inspired initial edges** -- a new node attends over its ``gat_k`` nearest entities:
   logits ``e_j = LeakyReLU(sim_j)``, weights ``a = softmax(e / temperature)``, and an
   association edge of strength ``gat_max_strength * a_j * sim_j`` (attention shares the weight,
   the cosine says how much there is to share) goes to every neighbour with
   ``sim_j >= gat_min_similarity`` and strength ``>= gat_min_strength``;
3. **facts** -- a repeated fact is reinforced (``s += repeat_gain * (1 - s)``, provenance merged and
   bounded: the first and the newest ``max_provenance - 1`` ids kept, the others counted);
   a new fact whose relation is functional (not declared multi-valued) and whose subject already
   has a *different* valid object under the same slot (the relation itself, or one of its declared
   paraphrases, ``EngramConfig.same_slot_relations``: "moved to" / "lives in") is **reconciled**;
   a relation no declared list names takes the slot and class of the declared relation closest in
   meaning (:func:`relation_kind`, ``EngramConfig.slot_similarity``) --
   except against facts written by the same observation (one observation never supersedes its own
   facts: "bought shoes and a red dress"). With ``time_order``, a fact said *before* its rival
   (the episodes' ISO times) is stored as history (invalid, ``invalidated_by`` the newer fact)
   instead of superseding it; otherwise the conflict is with policy ``"newer"`` the old edge is invalidated (``valid=False``,
   ``valid_to``, ``invalidated_by`` = the new edge; it leaves the traversable structure but stays
   inspectable through :meth:`LiquidGraph.history`), with ``"stronger"`` the edge with the larger
   ``strength * confidence`` wins and the loser is stored invalid (a fact said again while invalid
   continues its own evidence, so a rejected challenger wins once restatements make it the stronger,
   as a new valid fact; its invalid record keeps its interval); the episodes that produced a
   superseded fact lose confidence (``superseded_episode_confidence``), so recall ranks them lower;
4. **episodes** -- when an episode id is given its node is linked to the facts' entities and its
   id and source id travel in every fact's provenance.

Every check (arguments, episode id) and every embedding is done before the first change to the
graph. Among several rivals, candidates and ties, the lowest id comes first, whatever the order of
the networkx adjacency. :func:`reconcile_subject` applies the same conflict policy to a node after a
merge (the SCC step), so a single-valued relation never keeps two valid objects.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .core import _as_triplets, norm_key
from .model import EngramReport
from .store import EDGE_ASSOC, EDGE_FACT, EDGE_MENTION, KIND_ENTITY, KIND_EPISODE
from .values import earliest_time, instant_key, said_after

__all__ = ["ASSOC_RELATION", "MENTION_RELATION", "engram", "fact_time", "gat_attention", "reconcile_subject",
           "relation_kind", "same_kind", "supersede", "typed_signature"]

ASSOC_RELATION = "related to"
_INTRA_MAX = 4096  # new mentions per call up to which their pairwise similarities are one product
MENTION_RELATION = "mentions"


def gat_attention(similarities: np.ndarray, *, temperature: float = 0.1, negative_slope: float = 0.2
                  ) -> np.ndarray:
    """GAT-style attention weights over neighbour similarities.

    ``softmax(LeakyReLU(sim) / temperature)``.

    >>> w = gat_attention(np.array([0.9, 0.9]))
    >>> [round(float(x), 3) for x in w]
    [0.5, 0.5]
    """
    s = np.asarray(similarities, dtype=np.float64)
    if s.size == 0:
        return s
    e = np.where(s > 0, s, negative_slope * s) / temperature
    e = np.exp(e - e.max())
    return e / e.sum()


def engram(g, triplets, *, episode: str | None = None, source: str | None = None, time: str | None = None,
           importance: float | None = None) -> EngramReport:
    """Write triplets into graph ``g`` (the :meth:`LiquidGraph.engram` logic, unlogged).

    Parameters
    ----------
    g : LiquidGraph
    triplets : sequence of (str, str, str)
        Facts as (subject, relation, object). Empty fields are skipped and reported.
    episode : str, optional
        Episode node id (from :meth:`LiquidGraph.add_episode`) these facts came from.
    source : str, optional
        Source id stored in the facts' provenance (the episode's source is added too).
    time : str, optional
        When the facts were said, if the episode carries no time: a fact's validity interval starts
        at the observation's time (``valid_from_time``) and a fact it supersedes ends there
        (``valid_to_time``); with no time at all the interval is in ticks only.
    importance : float, optional
        Importance of the nodes written (default ``EngramConfig.init_importance`` for new nodes).

    Returns
    -------
    EngramReport
    """
    cfg = g.config.engram
    nd, ed = g.nodes, g.edges
    trips = _as_triplets(triplets)
    rep = EngramReport(n_triplets=len(trips))
    if importance is not None and not 0.0 <= float(importance) <= 1.0:
        raise ValueError(f"importance must be in [0, 1], got {importance}")
    ep_idx = None
    episodes: list[str] = []
    sources: list[str] = [] if source is None else [str(source)]
    if episode is not None:
        ep_idx = g._idx(episode)
        if nd.kind[ep_idx] != KIND_EPISODE:
            raise ValueError(f"{episode!r} is not an episode node; pass the id returned by add_episode()")
        episodes = [g.node_id(ep_idx)]
        ep_src = nd.meta[ep_idx].get("source")
        if ep_src is not None and ep_src not in sources:
            sources.append(ep_src)
    imp = cfg.init_importance if importance is None else float(importance)

    # -- clean input -------------------------------------------------------------------------
    clean: list[tuple[str, str, str, str, str, str]] = []
    for t in trips:
        s, r, o = (x.strip() for x in t)
        ks, kr, ko = norm_key(s), norm_key(r), norm_key(o)
        if not (s and r and o) or not ks or not ko:
            rep.skipped.append((t, "empty subject, relation or object"))
            continue
        clean.append((s, r, o, ks, kr, ko))
    if not clean:
        return rep

    # -- embed what is new --------------------------------------------------------------------
    ent_texts: dict[str, str] = {}
    for s, r, o, ks, kr, ko in clean:
        for text, key in ((s, ks), (o, ko)):
            if key not in g._entity_key and key not in ent_texts:
                ent_texts[key] = text
    rel_texts: dict[str, str] = {}
    for s, r, o, ks, kr, ko in clean:
        if kr not in g._rel_id and kr not in rel_texts:
            rel_texts[kr] = r
    extra = [t for t in (ASSOC_RELATION, MENTION_RELATION) if t not in g._rel_id and t not in rel_texts]
    for t in extra:
        rel_texts[t] = t
    ent_keys = list(ent_texts)
    vecs = g._encode([ent_texts[k] for k in ent_keys] + list(rel_texts.values()))
    ent_vecs, rel_vecs = vecs[: len(ent_keys)], vecs[len(ent_keys):]
    if "_rel_protos" not in g.__dict__ and cfg.slot_similarity <= 1.0 \
            and any(not cfg.declared(kr) for *_, kr, _ in clean):
        _relation_protos(g)  # relation_kind may need the declared labels' embeddings below: embedded now
    found = None
    if ent_keys:  # the last fallible step; nothing has changed so far
        found = g._ent_index.search(ent_vecs, max(cfg.gat_k, 1), g._emb, expansion=g.config.index.expansion_resolve)
    for (key, text), v in zip(rel_texts.items(), rel_vecs):
        g._relation(key, v)
    assoc_rel = g._rel_id[ASSOC_RELATION]
    mention_rel = g._rel_id[MENTION_RELATION]

    # -- entity resolution + GAT edges ------------------------------------------------------
    # One batched index search for every new key of the call; the entities created earlier in the
    # same call are compared through one (m, m) product of the call's vectors, and the created rows
    # join the index in one insert at the end (nothing in between searches the index).
    touched: dict[int, None] = {}
    if ent_keys:
        k_search = max(cfg.gat_k, 1)
        # (m, m) similarities of the call's new mentions; a huge call compares row by row instead
        intra = ent_vecs @ ent_vecs.T if 1 < len(ent_keys) <= _INTRA_MAX else None
        created: list[int] = []  # node rows created in this call
        created_j: list[int] = []  # their positions in ent_keys
        thr, gat_min_sim, gat_min_st = cfg.resolve_threshold, cfg.gat_min_similarity, cfg.gat_min_strength
        for j, key in enumerate(ent_keys):
            v = ent_vecs[j]
            rows, sims = found[j]
            if created:
                cs = intra[j, created_j] if intra is not None else ent_vecs[created_j] @ v
                # created rows have larger ids than every indexed row: they only enter the top-k when
                # strictly more similar than its last member (or when the top-k is not full)
                if rows.size < k_search or float(cs.max()) > float(sims[-1]):
                    rows = np.concatenate([rows, np.asarray(created, dtype=np.int64)])
                    sims = np.concatenate([sims, cs.astype(np.float32)])
                    order = np.lexsort((rows, -sims))[:k_search]
                    rows, sims = rows[order], sims[order]
            best = float(sims[0]) if sims.size else -1.0
            if best >= thr and cfg.typed_resolution:  # the most similar candidate that may be the same thing
                ok = [m for m in range(sims.size) if sims[m] >= thr
                      and same_kind(ent_texts[key], nd.text[int(rows[m])], float(sims[m]), cfg.short_name_threshold)]
                if ok:
                    rows, sims = rows[ok[0]:], sims[ok[0]:]
                    best = float(sims[0])
                else:
                    best = min(best, thr - 1e-6)  # a near miss: a new node, novelty from the nearest
            if best >= thr:
                i = int(rows[0])
                g._entity_key[key] = i
                meta = nd.meta[i]
                if key not in meta["keys"] or ent_texts[key] not in meta["aliases"]:  # a new cell, not in place
                    nd.meta[i] = {**meta, "keys": _with(meta["keys"], key), "aliases": _with(meta["aliases"], ent_texts[key])}
                rep.resolved.append((ent_texts[key], g.node_id(i), best))
                continue
            novelty = float(1.0 - max(best, 0.0))
            i = g._add_node(ent_texts[key], v, KIND_ENTITY, importance=imp, surprise=cfg.novelty_surprise * novelty,
                            index=False)
            created.append(i)
            created_j.append(j)
            rep.new_nodes.append(g.node_id(i))
            if cfg.gat and sims.size and sims[0] >= gat_min_sim:
                keep = sims >= gat_min_sim
                att = gat_attention(sims[keep], temperature=cfg.gat_temperature)
                for nb, a, sim in zip(rows[keep].tolist(), att.tolist(), sims[keep].tolist()):
                    st = cfg.gat_max_strength * a * sim
                    if st >= gat_min_st and nb != i:
                        e = g._add_edge(i, nb, assoc_rel, EDGE_ASSOC, st, cfg.init_confidence, episodes, sources)
                        rep.association_edges.append(e)
        if created:
            g._ent_index.add(np.asarray(created, dtype=np.int64), g._emb)

    # -- facts ----------------------------------------------------------------------------
    tick = g.tick
    n_access, n_last, n_imp = nd.access, nd.last_access, nd.importance  # views; no node is added below
    call_edges: set[int] = set()  # facts this call wrote: one observation never supersedes its own facts
    when = _iso_day(nd.meta[ep_idx].get("time") if ep_idx is not None else None) or _iso_day(time)
    # when the observation was said, as given: a fact's validity interval in time starts (and a
    # superseded one ends) there; without it the interval is in ticks only
    said = (nd.meta[ep_idx].get("time") if ep_idx is not None else None) or time
    entity_key, rel_id = g._entity_key, g._rel_id
    for s, r, o, ks, kr, ko in clean:
        si, oi = entity_key[ks], entity_key[ko]
        rid = rel_id[kr]
        for i in (si, oi):
            n_access[i] += 1
            n_last[i] = tick
            if importance is not None and n_imp[i] < imp:
                n_imp[i] = imp
            touched[i] = None
        if si == oi:
            rep.skipped.append(((s, r, o), "subject and object resolve to the same node"))
            continue
        e = g._find_edge(si, oi, rid, EDGE_FACT)
        if e is not None:
            ed.strength[e] += cfg.repeat_gain * (1.0 - ed.strength[e])
            ed.confidence[e] += cfg.repeat_gain * (1.0 - ed.confidence[e])
            ed.last_used[e] = tick
            ed.uses[e] += 1
            g._add_provenance(e, episodes, sources)
            start = ed.valid_from_time[e]
            ed.valid_from_time[e] = earliest_time(start, said)  # an older statement read later
            if cfg.time_order and when is not None and ed.valid[e] and ed.valid_from_time[e] != start:
                _end_history_at(g, si, rid, e, when)  # the slot's older values now end where this one began
            rep.reinforced_edges.append(e)
        else:
            rivals = []
            # known kinds first; an undeclared relation is judged by meaning only where a conflict may be
            kind = g._rel_kind.get(kr) or (relation_kind(g, kr) if cfg.declared(kr) else None)
            if cfg.reconcile and (kind is None or kind[1]):
                others = [int(x) for nb, kd in g.G._succ[si].items() if nb != oi for x in kd
                          if ed.kind[x] == EDGE_FACT and x not in call_edges
                          and not (episodes and episodes[0] in ed.episodes[x])]
                slot, functional = (kind or relation_kind(g, kr)) if others else ("", False)
                if functional:
                    rivals = [x for x in others if _in_slot(g, x, rid, slot)]
                rivals.sort()  # id order, not adjacency order
            if rivals and cfg.time_order and when is not None:
                later = [x for x in rivals if said_after(fact_time(g, x), when)]
                if later:  # said before what memory holds: stored as history, superseded by the newer fact
                    e = g._add_edge(si, oi, rid, EDGE_FACT, cfg.init_strength, cfg.init_confidence, episodes,
                                    sources, valid=False, time=said)
                    ed.invalidated_by[e] = ed.uid[max(later, key=lambda x: (instant_key(fact_time(g, x)), x))]
                    ed.valid_to_time[e] = _first_said_after(g, later, when)  # true until the next statement
                    # history read out of order: an older statement of the slot now ends at this one (Lima in
                    # January, stored after Rome in March, ends at Oslo in February once that is read)
                    _end_history_at(g, si, rid, e, when)
                    rep.rejected_edges.append(e)
                    call_edges.add(e)
                    continue
            e = None
            if rivals and cfg.conflict_policy == "stronger":
                old_best = max(rivals, key=lambda x: ed.strength[x] * ed.confidence[x])
                best = ed.strength[old_best] * ed.confidence[old_best]
                prior = _stored_invalid(g, si, oi, rid)
                if prior is not None:  # said before and not valid now: its evidence counts, as a valid fact's does
                    strength = ed.strength[prior] + cfg.repeat_gain * (1.0 - ed.strength[prior])
                    confidence = ed.confidence[prior] + cfg.repeat_gain * (1.0 - ed.confidence[prior])
                    if strength * confidence <= best:  # still the weaker: the record gathers the evidence
                        ed.strength[prior], ed.confidence[prior] = strength, confidence
                        ed.last_used[prior] = tick
                        ed.uses[prior] += 1
                        g._add_provenance(prior, episodes, sources)
                        ed.invalidated_by[prior] = ed.uid[old_best]
                        rep.rejected_edges.append(prior)
                        call_edges.add(prior)
                        continue
                    # now the stronger: a new valid fact with all the evidence (the record keeps its interval)
                    e = g._add_edge(si, oi, rid, EDGE_FACT, strength, confidence, list(ed.episodes[prior]),
                                    list(ed.sources[prior]), time=said)
                    ed.uses[e] = ed.uses[prior] + 1
                    g._add_provenance(e, episodes, sources, int(ed.provenance_dropped[prior]))
                elif best > cfg.init_strength * cfg.init_confidence:
                    e = g._add_edge(si, oi, rid, EDGE_FACT, cfg.init_strength, cfg.init_confidence, episodes,
                                    sources, valid=False, time=said)
                    ed.invalidated_by[e] = ed.uid[old_best]
                    rep.rejected_edges.append(e)
                    call_edges.add(e)
                    continue
            if e is None:
                e = g._add_edge(si, oi, rid, EDGE_FACT, cfg.init_strength, cfg.init_confidence, episodes, sources,
                                time=said)
            rep.new_edges.append(e)
            call_edges.add(e)
            for x in rivals:
                supersede(g, x, e, keep_episodes=episodes, time=said)
                rep.invalidated_edges.append(x)
            if rivals:
                for i in (si, oi, int(ed.dst[rivals[0]])):
                    nd.surprise[i] = max(nd.surprise[i], cfg.conflict_surprise)
    # -- episode links --------------------------------------------------------------------
    if ep_idx is not None and (rep.new_edges or rep.reinforced_edges or rep.rejected_edges) \
            and not nd.meta[ep_idx].get("consolidated"):
        nd.meta[ep_idx] = {**nd.meta[ep_idx], "consolidated": True}  # replaced, never mutated (snapshots share it)
    if ep_idx is not None and cfg.link_episodes:
        for i in touched:
            if g._find_edge(ep_idx, i, mention_rel, EDGE_MENTION) is None:
                g._add_edge(ep_idx, i, mention_rel, EDGE_MENTION, cfg.episode_link_strength, 1.0, episodes, sources,
                            time=said)
        nd.last_access[ep_idx] = tick
    uid = ed.uid  # the report names edges by id, not by row
    for name in ("new_edges", "reinforced_edges", "invalidated_edges", "rejected_edges", "association_edges"):
        setattr(rep, name, [int(uid[e]) for e in getattr(rep, name)])
    return rep


_MONTHS = {m: i for i, names in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
     ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
     ("november", "nov"), ("december", "dec")], start=1) for m in names}
_DAYS = {d: i for i, names in enumerate([("monday", "mon"), ("tuesday", "tue"), ("wednesday", "wed"),
                                          ("thursday", "thu"), ("friday", "fri"), ("saturday", "sat"),
                                          ("sunday", "sun")]) for d in names}
_ARTICLES = {"a", "an", "the"}


def typed_signature(text: str) -> tuple:
    """What must be equal for two mentions of a date, time, number or quantity to be the same thing.

    Digit runs (as numbers: ``07`` = ``7``), month and weekday names, ``am`` / ``pm``, in order of
    appearance; empty for a text with none of them.

    >>> typed_signature("8 May 2023"), typed_signature("May 8, 2023")
    (('n8', 'm5', 'n2023'), ('m5', 'n8', 'n2023'))
    >>> typed_signature("5 pm"), typed_signature("Caroline")
    (('n5', 'pm'), ())
    """
    import re

    out = []
    for tok in re.findall(r"\d+(?:\.\d+)?|[a-z]+", text.lower()):
        if tok[0].isdigit():
            out.append("n" + (tok.lstrip("0") or "0"))
        elif tok in _MONTHS:
            out.append(f"m{_MONTHS[tok]}")
        elif tok in _DAYS:
            out.append(f"d{_DAYS[tok]}")
        elif tok in ("am", "pm"):
            out.append(tok)
    return tuple(out)


def same_kind(a: str, b: str, similarity: float = 1.0, strict: float = 0.95) -> bool:
    """Whether mentions ``a`` and ``b`` may name the same entity (checked before an embedding match).

    Dates, times, numbers and quantities are never merged by similarity: their typed signatures
    (:func:`typed_signature`, as sorted multisets, so "8 May 2023" = "May 8, 2023") must be equal.
    Short names (at most three words each, articles aside) merge when every word of each matches a
    word of the other (equal, one a stem of the other, or the same first four letters) -- "blorp" /
    "blorps", "blue die" / "blue dies", "Teal Bridge" /
    "the Teal Bridge", but not "Caroline" / "Caroline's son" -- or else only at cosine
    ``similarity >= strict``:
    "Caroline's son" / "Caroline's daughter" (about 0.9 with MiniLM) and "Jon" / "John" (0.60)
    stay apart.

    >>> same_kind("7 May 2023", "8 May 2023"), same_kind("8 May 2023", "May 8, 2023")
    (False, True)
    >>> same_kind("Caroline's son", "Caroline's daughter", 0.92), same_kind("blorp", "blorps", 0.94)
    (False, True)
    >>> same_kind("Jon", "John", 0.60), same_kind("bob", "robert", 0.96)
    (False, True)
    """
    import re

    if sorted(typed_signature(a)) != sorted(typed_signature(b)):
        return False
    def words(t: str) -> list[str]:
        return [w.lstrip("0") or "0" if w.isdigit() else w for w in re.findall(r"\w+", t.lower())
                if w not in _ARTICLES]

    wa, wb = words(a), words(b)
    if len(wa) > 3 or len(wb) > 3 or similarity >= strict - 1e-6:
        return True

    def match(w: str, ws: list[str]) -> bool:  # equal, a stem of it (die / dies), or the same first 4 letters
        return any(w == x or (min(len(w), len(x)) >= 3 and (w.startswith(x) or x.startswith(w)))
                   or (len(w) >= 4 and len(x) >= 4 and w[:4] == x[:4]) for x in ws)

    return bool(wa) and bool(wb) and all(match(w, wb) for w in wa) and all(match(w, wa) for w in wb)


def _iso_day(time: str | None) -> str | None:
    """``YYYY-MM-DD[Thh:mm...]`` of an ISO time stamp (comparable as a string), or None."""
    import re

    if time and re.match(r"\d{4}-\d{2}-\d{2}", time):
        return time
    return None


def fact_time(g, e: int) -> str | None:
    """When fact edge ``e`` was last said: the latest ISO time of the episodes in its provenance; for a fact
    written without an episode (``engram(..., time=)``), the time it was stated at (``valid_from_time``)."""
    nd = g.nodes
    # an episode pruned since still tells when it was said (compaction keeps such rows)
    times = [_iso_day(nd.meta[r].get("time")) for r in map(g._ep_row, g.edges.episodes[e]) if r >= 0]
    times = [t for t in times if t]
    return max(times, key=instant_key) if times else _iso_day(g.edges.valid_from_time[e])



def _relation_protos(g) -> tuple[list[str], np.ndarray]:
    """The declared relation labels and their embeddings, encoded once per graph (they depend on the config and
    the embedder only; :func:`engram` encodes them before its first change when it may need them)."""
    protos = g.__dict__.get("_rel_protos")
    if protos is None:
        names = list(g.config.engram.declared_relations())
        protos = (names, g._encode(names))
        g._rel_protos = protos
    return protos


def relation_kind(g, key: str) -> tuple[str, bool]:
    """The slot a (normalised) relation writes and whether it is single-valued, in graph ``g``.

    A relation named in a declared list of ``g.config.engram`` (``functional_relations``,
    ``multi_valued_relations``, ``same_slot_relations``) is what they say (``EngramConfig.slot`` /
    ``is_functional``). Any other relation is decided **by meaning**: the declared relation whose
    label embedding is most similar to its own (cosine, ties by name) lends it its slot and its
    class when the cosine reaches ``slot_similarity`` ("feeds mostly on" writes the slot of "eat";
    "build nests out of" is multi-valued like "build nests from"); below, it is its own slot with
    the mode's default (``functional="all"``: single-valued). ``python -m mags_lib.bench.relations``
    measures the decision against the game worlds' schema.

    Decisions are cached per graph (cleared whenever the state is reloaded); the declared labels
    are embedded once per graph, the first time an undeclared relation meets a possible conflict.

    Examples
    --------
    >>> from mags_lib.embed import HashEmbedder
    >>> from mags_lib.graph import LiquidGraph
    >>> g = LiquidGraph(HashEmbedder(dim=64))
    >>> relation_kind(g, "moved to"), relation_kind(g, "are afraid of")
    (('lives in', True), ('are afraid of', False))
    """
    cache = g._rel_kind
    out = cache.get(key)
    if out is not None:
        return out
    cfg = g.config.engram
    if cfg.declared(key) or cfg.slot_similarity > 1.0:
        out = (cfg.slot(key), cfg.is_functional(key))
    else:
        names, P = _relation_protos(g)
        rid = g._rel_id.get(key)
        v = g._rel_emb[rid] if rid is not None else g._encode([key])[0]
        sims = P @ v if names else np.zeros(0)
        j = int(np.argmax(sims)) if sims.size else -1  # argmax: the first (by name) of equal bests
        if j >= 0 and float(sims[j]) >= cfg.slot_similarity:
            out = (cfg.slot(names[j]), cfg.is_functional(names[j]))
        else:
            out = (key, cfg.is_functional(key))
    cache[key] = out
    return out


def _first_said_after(g, edges, when: str) -> str | None:
    """The earliest ISO time after ``when`` at which one of ``edges`` was said (their episodes' times; an edge
    written without an episode, the time it was stated at)."""
    nd = g.nodes
    times = [t for e in edges for r in map(g._ep_row, g.edges.episodes[e]) if r >= 0
             for t in (_iso_day(nd.meta[r].get("time")),) if said_after(t, when)]
    times += [t for e in edges if not g.edges.episodes[e]
              for t in (_iso_day(g.edges.valid_from_time[e]),) if said_after(t, when)]
    return min(times, key=instant_key) if times else None


def _end_history_at(g, si: int, rid: int, e: int, when: str) -> None:
    """Fact ``e`` of subject row ``si`` (relation ``rid``) holds from ``when``: each superseded value of its slot
    said before ``when`` and ending after it now ends at ``when``, superseded by ``e`` (a statement read out of
    order takes its place in the slot's history)."""
    ed = g.edges
    for x in _stored_history(g, si, rid, e):
        if said_after(when, fact_time(g, x)) and said_after(ed.valid_to_time[x], when):
            ed.valid_to_time[x] = when
            ed.invalidated_by[x] = ed.uid[e]


def _stored_history(g, si: int, rid: int, new: int) -> list[int]:
    """The superseded facts of subject row ``si`` in the slot of relation ``rid`` (the same relation, or a
    functional one of the same slot) with an end in time, other than ``new``: the slot's history."""
    ed = g.edges
    rows = np.flatnonzero(ed.alive & ~ed.valid & (ed.kind == EDGE_FACT) & (ed.src == si)).tolist()
    if not rows:
        return []
    slot, _ = relation_kind(g, g._rel_text[rid])
    return [x for x in rows if x != new and ed.valid_to_time[x] and _in_slot(g, x, rid, slot)]


def _in_slot(g, x: int, rid: int, slot: str) -> bool:
    """Whether fact edge ``x`` fills the slot of relation ``rid`` (``slot`` its kind): the same relation, or a
    functional one of the same slot."""
    xslot, xfunc = relation_kind(g, g._rel_text[g.edges.rel[x]])
    return g.edges.rel[x] == rid or (xslot == slot and xfunc)


def _with(items: list, x) -> list:
    return items if x in items else [*items, x]


def _stored_invalid(g, si: int, oi: int, rid: int) -> int | None:
    """The newest live fact ``si -rid-> oi`` that is not valid (a rejected challenger, a superseded fact, or
    history stored by ``time_order``), or None. Under ``conflict_policy="stronger"`` a fact said again
    continues its evidence: a challenger rejected once is reinforced by each restatement and wins the slot
    when it becomes the stronger, instead of starting each time at the initial strength."""
    ed = g.edges
    mask = (ed.alive & ~ed.valid & (ed.kind == EDGE_FACT) & (ed.src == si) & (ed.dst == oi) & (ed.rel == rid))
    found = np.flatnonzero(mask)
    return int(found[-1]) if found.size else None


def supersede(g, loser: int, winner: int, *, keep_episodes=(), time: str | None = None) -> None:
    """Invalidate fact edge ``loser`` in favour of edge ``winner`` (unlogged).

    The old fact leaves the traversable structure (``valid=False``, ``valid_to``, ``invalidated_by``)
    and the episodes that said it -- except ``keep_episodes`` -- lose confidence (at most
    ``superseded_episode_confidence``; multiplied by it each time with ``compound_superseded``), so recall ranks
    them lower. Its interval closes at ``time``
    (when the superseding observation was said; default: when ``winner`` was first said).
    """
    nd, ed = g.nodes, g.edges
    g._invalidate_edge(loser, by=winner, time=time if time is not None else ed.valid_from_time[winner])
    for ep_id in ed.episodes[loser]:  # the inputs that said the old fact now count less
        j = g._ep_row(ep_id)
        if j >= 0 and nd.alive[j] and ep_id not in keep_episodes:
            if g.config.engram.compound_superseded:
                nd.confidence[j] *= g.config.engram.superseded_episode_confidence
            else:  # once: an episode is outdated or not, however many of the facts drawn from it were superseded
                nd.confidence[j] = min(nd.confidence[j], g.config.engram.superseded_episode_confidence)


def reconcile_subject(g, i: int) -> int:
    """Apply the conflict policy to the valid facts of node ``i`` (e.g. after a merge); unlogged.

    For every functional slot (:func:`relation_kind`: "moved to" and "lives in" are one slot, as in
    :func:`engram`) under which ``i`` holds several valid objects, one fact stays valid -- the newest (highest edge
    id) with policy ``"newer"`` (with ``time_order``, the one said last: a fact said before another never
    supersedes it, as in :func:`engram`), the largest ``strength * confidence`` with ``"stronger"`` (newest on a
    tie) -- and the others are superseded by it (:func:`supersede`; with ``time_order`` each closes when the
    slot's next statement after it was said); the endpoints get ``conflict_surprise``.

    Returns
    -------
    int
        Number of facts superseded.
    """
    cfg = g.config.engram
    if not cfg.reconcile:
        return 0
    nd, ed = g.nodes, g.edges
    kinds: dict[int, tuple[str, bool]] = {}
    by_slot: dict[str, list[int]] = {}
    for kd in g.G._succ[i].values():
        for e in kd:
            if ed.kind[e] == EDGE_FACT:
                rid = int(ed.rel[e])
                if rid not in kinds:
                    kinds[rid] = relation_kind(g, g._rel_text[rid])
                slot, functional = kinds[rid]
                if functional:
                    by_slot.setdefault(slot, []).append(int(e))
    n = 0
    for slot in sorted(by_slot):
        facts = sorted(by_slot[slot])
        if len(facts) < 2:
            continue
        times = {e: fact_time(g, e) for e in facts} if cfg.time_order else {}
        if cfg.conflict_policy == "stronger":
            win = max(facts, key=lambda e: (ed.strength[e] * ed.confidence[e], e))
        else:  # the newest; with time_order, a fact said before another never wins over it (as in engram)
            win = facts[0]
            for x in facts[1:]:
                if not said_after(times.get(win), times.get(x)):
                    win = x
        for x in facts:
            if x != win:
                # with time_order, true until the next statement of the slot (the winner's if none between)
                end = _first_said_after(g, [y for y in facts if y != x], times[x]) if times.get(x) else None
                supersede(g, x, win, time=end)
                nd.surprise[int(ed.dst[x])] = max(nd.surprise[int(ed.dst[x])], cfg.conflict_surprise)
                n += 1
        for j in (i, int(ed.dst[win])):
            nd.surprise[j] = max(nd.surprise[j], cfg.conflict_surprise)
    return n
