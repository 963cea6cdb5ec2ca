"""Dynamics of the Liquid Knowledge Graph, vectorised over the edge arrays.

``maintain`` runs one tick: the enabled steps in :data:`STEPS` order, then advances ``g.tick``.
Each step is also a function of its own, ``step(g, cfg=None) -> dict`` (counts of what it did).
Called directly they are *not* written to the operation log; use ``g.maintain(steps=[...])`` for a
logged tick that runs only some steps.

Rules (``s`` = edge strength, every rate from :class:`~mags_lib.graph.config.DynamicsConfig`):

* **hebbian** -- an edge activated ``a`` times by recalls since the last tick:
  ``s <- 1 - (1 - s) * (1 - hebbian_rate) ** a``; anchors recalled together are linked (a new
  association edge of ``anchor_link_strength``, or the existing one strengthened the same way);
* **decay** -- ``s <- s * (1 - decay_rate * (1 - p))`` where the protection ``p`` is the larger of
  the recency protection ``recency_protection * exp(-(tick - last_used) / recency_tau)`` and the
  salience protection ``salience_protection * salience`` (:func:`salience`: importance, surprise,
  usage); permanent edges exempt. A fact edge of salience ``>= keep_salience`` decays (and is
  weakened by the Game-of-Life rule) no lower than ``keep_strength``. With the defaults (rate 0.01,
  a plain fact's salience 0.3) a fact said once and never used fades from 0.5 to 0.3 in about 70
  ticks, then its lonely ends speed it up: it is pruned after about 100 ticks (median; some 800
  turns at the agent's cadence of one tick per 8 observations; ``python -m mags_lib.bench.longevity``);
* **game_of_life** -- a node's live count is its number of semantic (fact and association) edges with ``s >=
  gol_live_strength`` (episode mention links left out, as in kcore and scc);
  lonely (``< gol_survive_min``) or crowded (``> gol_survive_max``) nodes get factor
  ``1 - gol_rate``, surviving nodes ``1 + gol_survive_gain`` (default 0: unchanged); an edge is multiplied by the geometric
  mean of its endpoints' factors (capped at 1). Birth: two live neighbours of a node touched this
  tick that share ``>= gol_birth_common`` live neighbours and are not linked get an association
  edge of ``gol_birth_strength``;
* **kcore** -- core numbers of the undirected semantic structure (fact and association edges;
  episode links would make every mentioned entity look central); if the main core's ``k >=
  kcore_min_k`` and it holds at most ``kcore_max_share`` of the entities, its internal edges get ``s += kcore_rate * (1 - s)``, its nodes ``importance +=
  kcore_importance * (1 - importance)`` and long-term stage;
* **scc** -- strongly connected components of the fact edges (association links are undirected in meaning, so
  they take no part in directed cycles) of at least
  ``scc_min_size`` nodes: internal edges ``s += scc_rate * (1 - s)``, members get a cluster id
  (smallest member's uid); in components of at most 256 entities (the pairwise comparison is
  quadratic), members with cosine ``>= scc_merge_similarity`` are merged (into the smallest id, or
  into the permanent one; two permanent nodes are never merged), then the merged node's facts are
  reconciled with the engram conflict policy (:func:`~mags_lib.graph.engram.reconcile_subject`), so
  a single-valued relation never keeps two valid objects after a merge;
* **solidify** -- edges with ``s >= solidify_strength`` and ``uses >= solidify_min_uses`` become
  permanent; nodes with ``>= solidify_node_edges`` permanent edges become permanent;
* **promote** -- working-memory entities with ``access >= promote_uses``, ``surprise >=
  promote_surprise`` or ``importance >= promote_importance`` move to long-term memory; above
  ``working_capacity`` the least recently accessed working nodes are forgotten;
* **prune** -- valid edges with ``s < prune_strength`` (salient facts exempt, see decay); nodes
  idle ``>= inactive_ticks`` with at most ``inactive_max_degree`` edges; entities isolated (no
  edge, superseded history included: its ends stay until they go as inactive) for ``>= isolated_grace`` ticks; then the capacity limits ``max_nodes`` / ``max_edges`` (least
  important / weakest first). Permanent nodes and edges are never pruned, nor the ends of a permanent edge
  (as inactive, over capacity or over working capacity). With ``keep_evidence``
  the ends of a valid fact are never pruned as inactive (the fact goes by its own strength, then its
  ends as isolated), and an episode is never pruned (inactive or over capacity) while it is the last
  live episode in the provenance of a valid fact. With ``keep_unconsolidated`` an episode that no
  valid fact stands for is never pruned as inactive: one no fact was ever drawn from (a memory of
  episodes only, a turn the write model found nothing in), and one whose facts all went by decay,
  pruning or supersession (``outlived_kept``: a fact forgotten for want of use does not take what was
  said with it). It is the only record of what was said, and only the capacity limit removes it. An
  episode goes as inactive once a valid fact drawn from it has another live source (a restatement),
  or once a fact drawn from it was removed on purpose (:meth:`LiquidGraph.forget` marks its sources).
"""

from __future__ import annotations

import time as _time
from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from .model import MaintainReport
from .store import EDGE_ASSOC, EDGE_FACT, KIND_ENTITY, KIND_EPISODE, STAGE_LONG, STAGE_WORKING

__all__ = [
    "MIN_STRENGTH",
    "STEPS",
    "core_numbers",
    "decay",
    "game_of_life",
    "hebbian",
    "kcore",
    "maintain",
    "promote",
    "prune",
    "reinforce_edges",
    "salience",
    "scc",
    "semantic_core_numbers",
    "solidify",
]

MIN_STRENGTH = 1e-6  # floor of a weakened edge (strengths stay in (0, 1])


def _live(g) -> np.ndarray:
    ed = g.edges
    return ed.alive & ed.valid


def reinforce_edges(g, eids: Sequence[int], reward: float, cfg=None) -> int:
    """Reward-path strengthening of edges ``eids`` (unlogged; see :meth:`LiquidGraph.reinforce`).

    ``eids`` are edge ids (as recall reports them); removed or superseded edges are skipped.
    ``reward > 0``: ``s += reward_rate * reward * (1 - s)``, a use counted and the edge's recency
    refreshed; ``reward < 0``: ``s *= 1 + reward_rate * reward`` (floored at :data:`MIN_STRENGTH`),
    neither a use nor a refresh (both protect an edge from decay: a punished path must not gain
    either); ``reward == 0`` changes nothing (returns 0).
    """
    cfg = cfg or g.config.dynamics
    ed = g.edges
    e = np.asarray(list(eids), dtype=np.int64)
    if e.size == 0:
        return 0
    e = g._erows(e, "reinforce")  # KeyError for an id never given out
    e = e[e >= 0]  # compacted away since
    e = np.unique(e[ed.alive[e] & ed.valid[e]])
    if e.size == 0:
        return 0
    r = float(reward)
    if r > 0:
        ed.strength[e] += cfg.reward_rate * r * (1.0 - ed.strength[e])
        ed.uses[e] += 1
        ed.last_used[e] = g.tick
    elif r < 0:
        ed.strength[e] = np.maximum(ed.strength[e] * (1.0 + cfg.reward_rate * r), MIN_STRENGTH)
    else:
        return 0
    return int(e.size)


def hebbian(g, cfg=None) -> dict:
    """Hebbian strengthening of co-activated edges and anchor pairs (see module docstring)."""
    from .engram import ASSOC_RELATION

    cfg = cfg or g.config.dynamics
    ed = g.edges
    act = ed.activation
    m = np.flatnonzero((act > 0) & _live(g))
    if m.size:
        ed.strength[m] = 1.0 - (1.0 - ed.strength[m]) * (1.0 - cfg.hebbian_rate) ** act[m]
    act[:] = 0.0
    n_new = n_str = 0
    if g._coact:
        rid = g._relation(ASSOC_RELATION)
        alive = g.nodes.alive
        for (u, v), c in sorted(Counter(g._coact).items()):
            if not (alive[u] and alive[v]):
                continue
            e = g._find_edge(u, v, rid, EDGE_ASSOC)
            if e is None:
                e = g._find_edge(v, u, rid, EDGE_ASSOC)
            if e is None:
                s0 = cfg.anchor_link_strength
                e = g._add_edge(u, v, rid, EDGE_ASSOC, s0, 1.0, [], [])
                ed.strength[e] = 1.0 - (1.0 - s0) * (1.0 - cfg.hebbian_rate) ** (c - 1)
                n_new += 1
            else:
                ed.strength[e] = 1.0 - (1.0 - ed.strength[e]) * (1.0 - cfg.hebbian_rate) ** c
                n_str += 1
            ed.last_used[e] = g.tick
        g._coact = []
    return {"edges_strengthened": int(m.size), "anchor_links_new": n_new, "anchor_links_strengthened": n_str}


def salience(g, eids, cfg=None) -> np.ndarray:
    """Salience of edges ``eids`` in [0, 1]: what makes a memory matter.

    The larger of what its two ends share -- the smaller of their ``max(importance, surprise)``, so a
    fact with an important hub (a speaker, a node of the k-core) is not salient for that alone; an
    input observed with an importance, or a contradiction's surprise, marks both ends -- and of its
    usage ``uses / (uses + salience_uses_half)`` (recalls and restatements both count as uses).

    Examples
    --------
    >>> from mags_lib.graph import LiquidGraph, TableEmbedder
    >>> g = LiquidGraph(TableEmbedder(dim=64))
    >>> e = g.engram([("tea", "is", "hot")], source="S1").new_edges[0]
    >>> g.nodes.importance[:], g.nodes.surprise[:] = 0.3, 0.0
    >>> g.edges.uses[e] = 2  # 2 / (2 + 2)
    >>> salience(g, [e]).tolist()
    [0.5]
    """
    cfg = cfg or g.config.dynamics
    ed, nd = g.edges, g.nodes
    e = np.asarray(eids, dtype=np.int64)
    node = np.maximum(nd.importance, nd.surprise)
    u = ed.uses[e].astype(np.float64)
    return np.maximum(np.minimum(node[ed.src[e]], node[ed.dst[e]]), u / (u + cfg.salience_uses_half))


def _floors(g, cfg, m: np.ndarray, sal: np.ndarray | None = None) -> np.ndarray:
    """Per edge of ``m``: the strength decay and the neighbourhood rule do not take it below
    (``keep_strength`` for salient facts, :data:`MIN_STRENGTH` otherwise)."""
    fl = np.full(m.size, MIN_STRENGTH)
    if cfg.keep_salience is not None and m.size:
        sal = salience(g, m, cfg) if sal is None else sal
        fl[(g.edges.kind[m] == EDGE_FACT) & (sal >= cfg.keep_salience)] = cfg.keep_strength
    return fl


def _weaken(g, m: np.ndarray, factor: np.ndarray, floor: np.ndarray) -> None:
    """``s *= factor`` on edges ``m``, never below ``floor`` (an edge already below stays where it is)."""
    s = g.edges.strength[m]
    g.edges.strength[m] = np.minimum(np.maximum(s * factor, np.minimum(s, floor)), 1.0)


def decay(g, cfg=None) -> dict:
    """Exponential decay with recency and salience protection (see module docstring)."""
    cfg = cfg or g.config.dynamics
    ed = g.edges
    m = np.flatnonzero(_live(g) & ~ed.permanent)
    if m.size == 0:
        return {"edges_decayed": 0, "mean_factor": 1.0}
    age = (g.tick - ed.last_used[m]).astype(np.float64)
    prot = cfg.recency_protection * np.exp(-np.maximum(age, 0.0) / cfg.recency_tau)
    sal = salience(g, m, cfg)
    prot = np.maximum(prot, cfg.salience_protection * sal)
    f = 1.0 - cfg.decay_rate * (1.0 - prot)
    _weaken(g, m, f, _floors(g, cfg, m, sal))
    return {"edges_decayed": int(m.size), "mean_factor": float(f.mean())}


def game_of_life(g, cfg=None) -> dict:
    """Game-of-Life neighbourhood rule on live-edge counts, with births (see module docstring)."""
    from .engram import ASSOC_RELATION

    cfg = cfg or g.config.dynamics
    ed, nd = g.edges, g.nodes
    n = nd.n
    live = _live(g)
    # the semantic block's edges (as kcore and scc): an episode's mention links would make every mentioned
    # entity crowded, and two facts told in one turn would share the episode as a common neighbour
    semantic = (ed.kind == EDGE_FACT) | (ed.kind == EDGE_ASSOC)
    strong = np.flatnonzero(live & semantic & (ed.strength >= cfg.gol_live_strength))
    cnt = np.bincount(ed.src[strong], minlength=n) + np.bincount(ed.dst[strong], minlength=n)
    lonely = cnt < cfg.gol_survive_min
    crowded = cnt > cfg.gol_survive_max
    f = np.where(lonely | crowded, 1.0 - cfg.gol_rate, 1.0 + cfg.gol_survive_gain)
    m = np.flatnonzero(live & ~ed.permanent)
    if m.size:
        fe = np.sqrt(f[ed.src[m]] * f[ed.dst[m]])
        _weaken(g, m, fe, _floors(g, cfg, m))
    alive = nd.alive
    births = 0
    if cfg.gol_birth and cfg.gol_max_births > 0:
        births = _births(g, cfg, ASSOC_RELATION)
    return {"lonely": int((lonely & alive).sum()), "crowded": int((crowded & alive).sum()),
            "surviving": int((~lonely & ~crowded & alive).sum()), "births": births}


def _live_neighbours(g, u: int, thr: float, limit: int) -> list[int]:
    """Up to ``limit`` neighbours of ``u`` over live semantic (fact, association) edges of strength >= ``thr``."""
    ed = g.edges
    pairs = []
    for adj in (g.G._succ[u], g.G._pred[u]):
        for v, kd in adj.items():
            pairs.extend((ed.strength[e], v) for e in kd
                         if ed.alive[e] and ed.valid[e] and ed.kind[e] in (EDGE_FACT, EDGE_ASSOC))
    best: dict[int, float] = {}
    for s, v in pairs:
        if s >= thr and v != u and s > best.get(v, 0.0):
            best[v] = s
    return [v for v, _ in sorted(best.items(), key=lambda x: (-x[1], x[0]))[:limit]]


def _births(g, cfg, assoc_text: str) -> int:
    nd = g.nodes
    active = np.flatnonzero(nd.alive & (nd.last_access == g.tick) & (nd.kind == KIND_ENTITY))
    if active.size == 0:
        return 0
    thr = cfg.gol_live_strength
    cache: dict[int, set] = {}

    def nbrs(u):
        if u not in cache:
            cache[u] = set(_live_neighbours(g, u, thr, 32))
        return cache[u]

    made = 0
    rid = None
    kinds = nd.kind
    for a in active.tolist():
        around = sorted(x for x in nbrs(a) if kinds[x] == KIND_ENTITY)
        for i in range(len(around)):
            for j in range(i + 1, len(around)):
                u, w = around[i], around[j]
                if w in g.G._succ[u] or u in g.G._succ[w]:
                    continue
                if len(nbrs(u) & nbrs(w)) >= cfg.gol_birth_common:
                    if rid is None:
                        rid = g._relation(assoc_text)
                    e = g._add_edge(u, w, rid, EDGE_ASSOC, cfg.gol_birth_strength, 1.0, [], [])
                    g.edges.last_used[e] = g.tick
                    cache.pop(u, None)
                    cache.pop(w, None)
                    made += 1
                    if made >= cfg.gol_max_births:
                        return made
    return made


def _csr_undirected(n: int, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr, indices) of the simple undirected graph on edges (u, v): no loops, no duplicates."""
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    keep = u != v
    a, b = np.minimum(u[keep], v[keep]), np.maximum(u[keep], v[keep])
    pair = np.unique(a * n + b)
    a, b = pair // n, pair % n
    src = np.concatenate([a, b])
    dst = np.concatenate([b, a])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order]


def _gather(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Concatenated neighbour lists of ``rows`` (vectorised)."""
    starts = indptr[rows]
    lens = indptr[rows + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offs = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return indices[offs + np.arange(total)]


def core_numbers(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Core number of every node of an undirected simple graph given by edge arrays (vectorised).

    Batch peeling (Batagelj-Zaversnik by levels): at level ``k`` all nodes of degree ``<= k`` are
    removed together and the degrees of their neighbours decremented, repeating on the touched
    nodes only, so the total work is ``O(E log E + k_max * n)``. Parallel edges and self-loops are
    ignored; nodes without edges have core number 0.

    Parameters
    ----------
    n : int
        Number of nodes (ids ``0..n-1``).
    u, v : ndarray of int
        Edge endpoints.

    Examples
    --------
    A triangle with a pendant node: the triangle is the 2-core.

    >>> core_numbers(4, np.array([0, 1, 2, 2]), np.array([1, 2, 0, 3])).tolist()
    [2, 2, 2, 1]
    """
    core = np.zeros(n, dtype=np.int64)
    if n == 0 or len(u) == 0:
        return core
    indptr, indices = _csr_undirected(n, u, v)
    deg = np.diff(indptr)
    alive = deg > 0
    k = 0
    while alive.any():
        k = max(k, int(deg[alive].min()))
        rm = np.flatnonzero(alive & (deg <= k))
        while rm.size:
            core[rm] = k
            alive[rm] = False
            nb = _gather(indptr, indices, rm)
            nb = nb[alive[nb]]
            if nb.size == 0:
                break
            touched, cnt = np.unique(nb, return_counts=True)
            deg[touched] -= cnt
            rm = touched[deg[touched] <= k]
    return core


def _semantic_live(g) -> np.ndarray:
    """Live fact and association edges (the semantic block; episode mention links excluded)."""
    ed = g.edges
    return np.flatnonzero(_live(g) & ((ed.kind == EDGE_FACT) | (ed.kind == EDGE_ASSOC)))


def semantic_core_numbers(g) -> np.ndarray:
    """Core numbers of the semantic block of ``g`` (one per node row; episodes get 0)."""
    live = _semantic_live(g)
    return core_numbers(g.nodes.n, g.edges.src[live], g.edges.dst[live])


def kcore(g, cfg=None) -> dict:
    """k-core consolidation of the main core (see module docstring)."""
    cfg = cfg or g.config.dynamics
    ed, nd = g.edges, g.nodes
    live = _semantic_live(g)
    if live.size == 0:
        return {"k": 0, "core_nodes": 0, "edges_strengthened": 0}
    core = core_numbers(nd.n, ed.src[live], ed.dst[live])
    kmax = int(core.max())
    if kmax < cfg.kcore_min_k:
        return {"k": kmax, "core_nodes": 0, "edges_strengthened": 0}
    main = core == kmax
    n_alive = int((nd.alive & (nd.kind == KIND_ENTITY)).sum())
    if main.sum() > cfg.kcore_max_share * n_alive:  # the "centre" is most of the graph: nothing is central
        return {"k": kmax, "core_nodes": 0, "edges_strengthened": 0, "skipped": "main core too large"}
    inside = live[main[ed.src[live]] & main[ed.dst[live]]]
    ed.strength[inside] += cfg.kcore_rate * (1.0 - ed.strength[inside])
    idx = np.flatnonzero(main)
    nd.importance[idx] += cfg.kcore_importance * (1.0 - nd.importance[idx])
    ent = idx[nd.kind[idx] == KIND_ENTITY]
    nd.stage[ent] = STAGE_LONG
    return {"k": kmax, "core_nodes": int(idx.size), "edges_strengthened": int(inside.size)}


def scc(g, cfg=None) -> dict:
    """Strongly-connected-component consolidation (see module docstring)."""
    cfg = cfg or g.config.dynamics
    ed, nd = g.edges, g.nodes
    n = nd.n
    # fact edges only: an association link means the same both ways but is stored from its older end to its newer
    # one, so with it a cycle (and a merge) depended on the order the facts came in
    live = np.flatnonzero(_live(g) & (ed.kind == EDGE_FACT))
    nd.cluster[:] = -1
    if live.size == 0 or n == 0:
        return {"components": 0, "nodes": 0, "edges_strengthened": 0, "merged": 0, "reconciled": 0}
    A = csr_matrix((np.ones(live.size), (ed.src[live], ed.dst[live])), shape=(n, n))
    _, labels = connected_components(A, directed=True, connection="strong")
    sizes = np.bincount(labels)
    member = (sizes[labels] >= cfg.scc_min_size) & nd.alive
    inside = live[member[ed.src[live]] & (labels[ed.src[live]] == labels[ed.dst[live]])]
    ed.strength[inside] += cfg.scc_rate * (1.0 - ed.strength[inside])
    midx = np.flatnonzero(member)
    merged = reconciled = 0
    n_comps = 0
    if midx.size:
        labs = labels[midx]
        minid = np.full(int(labels.max()) + 1, n, dtype=np.int64)
        np.minimum.at(minid, labs, midx)
        nd.cluster[midx] = nd.uid[minid[labs]]  # an id: stable through compaction
        n_comps = int(np.unique(labs).size)
        # merge near-duplicate entities inside small components (pairwise cosine)
        ent = midx[nd.kind[midx] == KIND_ENTITY]
        if ent.size:
            el = labels[ent]
            cnt = np.bincount(el)
            ok = (cnt[el] >= 2) & (cnt[el] <= 256)
            ent, el = ent[ok], el[ok]
            order = np.lexsort((ent, el))
            ent, el = ent[order], el[order]
            bounds = np.flatnonzero(np.diff(el)) + 1
            keeps: set[int] = set()
            for grp in np.split(ent, bounds) if ent.size else []:
                merged += _merge_similar(g, grp.tolist(), cfg.scc_merge_similarity, keeps)
            if keeps:
                from .engram import reconcile_subject

                reconciled = sum(reconcile_subject(g, i) for i in sorted(keeps) if g.nodes.alive[i])
    return {"components": n_comps, "nodes": int(midx.size), "edges_strengthened": int(inside.size),
            "merged": merged, "reconciled": reconciled}


def _merge_similar(g, ents: list[int], threshold: float, keeps: set | None = None) -> int:
    """Merge the entities of one component whose cosine is at/above ``threshold`` (union-find, complete linkage:
    every pair of a merged group is similar enough and of one kind).

    The ids of the nodes that absorbed others are added to ``keeps``."""
    nd = g.nodes
    E = g._emb[ents]
    sims = E @ E.T
    ia, ib = np.nonzero(np.triu(sims >= threshold, k=1))
    if ia.size == 0:
        return 0
    parent = {i: i for i in ents}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    typed = g.config.engram.typed_resolution
    if typed:
        from .engram import same_kind
    pos = {x: k for k, x in enumerate(ents)}
    members = {i: [i] for i in ents}

    def mergeable(x: int, y: int) -> bool:
        a, b = pos[x], pos[y]
        if sims[a, b] < threshold:
            return False
        # dates, numbers, short names: never merged by similarity alone
        return not typed or same_kind(nd.text[x], nd.text[y], float(sims[a, b]), g.config.engram.short_name_threshold)

    for a, b in zip(ia.tolist(), ib.tolist()):
        ra, rb = find(ents[a]), find(ents[b])
        # complete linkage: two groups join only when every pair across them may merge (a long name similar to
        # both "Caroline's son" and "Caroline's daughter" must not join the two)
        if ra != rb and all(mergeable(x, y) for x in members[ra] for y in members[rb]):
            lo, hi = min(ra, rb), max(ra, rb)
            parent[hi] = lo
            members[lo] += members.pop(hi)
    groups: dict[int, list[int]] = {}
    for i in ents:
        groups.setdefault(find(i), []).append(i)
    merged = 0
    for root in sorted(groups):
        alive = [i for i in groups[root] if nd.alive[i]]
        if len(alive) < 2:
            continue
        perm = [i for i in alive if nd.permanent[i]]
        keep = min(perm) if perm else min(alive)  # the permanent member, else the smallest id
        for i in sorted(alive, reverse=True):
            if i == keep or nd.permanent[i]:  # two permanent nodes are never merged away
                continue
            g._merge_nodes(keep, i)
            merged += 1
            if keeps is not None:
                keeps.add(keep)
    return merged


def solidify(g, cfg=None) -> dict:
    """Make very strong, often used edges (and nodes with many of them) permanent."""
    cfg = cfg or g.config.dynamics
    ed, nd = g.edges, g.nodes
    cand = np.flatnonzero(_live(g) & ~ed.permanent & (ed.strength >= cfg.solidify_strength)
                          & (ed.uses >= cfg.solidify_min_uses))
    ed.permanent[cand] = True
    perm = np.flatnonzero(_live(g) & ed.permanent)
    cnt = np.bincount(ed.src[perm], minlength=nd.n) + np.bincount(ed.dst[perm], minlength=nd.n)
    newn = np.flatnonzero(nd.alive & ~nd.permanent & (cnt >= cfg.solidify_node_edges))
    nd.permanent[newn] = True
    return {"edges_solidified": int(cand.size), "nodes_solidified": int(newn.size)}


def promote(g, cfg=None) -> dict:
    """Working memory -> long-term promotion, and working-memory capacity (see module docstring)."""
    cfg = cfg or g.config.dynamics
    nd = g.nodes
    wm = nd.alive & (nd.kind == KIND_ENTITY) & (nd.stage == STAGE_WORKING)
    up = np.flatnonzero(wm & ((nd.access >= cfg.promote_uses) | (nd.surprise >= cfg.promote_surprise)
                              | (nd.importance >= cfg.promote_importance) | nd.permanent))
    nd.stage[up] = STAGE_LONG
    forgotten = 0
    if cfg.working_capacity is not None:
        left = np.flatnonzero(nd.alive & (nd.kind == KIND_ENTITY) & (nd.stage == STAGE_WORKING) & ~nd.permanent
                              & ~_permanent_ends(g))
        excess = left.size - cfg.working_capacity
        if excess > 0:
            order = np.lexsort((left, nd.last_access[left]))
            forgotten = g._kill_nodes(left[order[:excess]])
    return {"promoted": int(up.size), "forgotten": forgotten}


def _permanent_ends(g) -> np.ndarray:
    """Per node row: whether it is an end of a live permanent edge (pruning it would take the edge with it)."""
    ed, nd = g.edges, g.nodes
    keep = np.zeros(nd.n, dtype=bool)
    perm = np.flatnonzero(ed.alive & ed.permanent)
    keep[ed.src[perm]] = True
    keep[ed.dst[perm]] = True
    return keep


def prune(g, cfg=None) -> dict:
    """Prune weak edges, inactive and isolated nodes, then enforce capacity (see module docstring)."""
    cfg = cfg or g.config.dynamics
    ed, nd = g.edges, g.nodes
    weak = np.flatnonzero(_live(g) & ~ed.permanent & (ed.strength < cfg.prune_strength))
    n_kept = 0
    if cfg.keep_salience is not None and weak.size:
        kept = (ed.kind[weak] == EDGE_FACT) & (salience(g, weak, cfg) >= cfg.keep_salience)
        n_kept = int(kept.sum())
        weak = weak[~kept]
    n_weak = g._kill_edges(weak)
    live = np.flatnonzero(_live(g))
    deg = np.bincount(ed.src[live], minlength=nd.n) + np.bincount(ed.dst[live], minlength=nd.n)
    free = nd.alive & ~nd.permanent & ~_permanent_ends(g)  # a permanent edge's ends stay with it
    inactive = free & ((g.tick - nd.last_access) >= cfg.inactive_ticks) & (deg <= cfg.inactive_max_degree)
    evidence = 0
    if cfg.keep_evidence:
        facts = live[ed.kind[live] == EDGE_FACT]
        inactive[ed.src[facts]] = False  # a valid fact's ends go with it, once it is pruned
        inactive[ed.dst[facts]] = False
        eps = np.flatnonzero(inactive & (nd.kind == KIND_EPISODE))
        kept = g._evidence_to_keep(eps) if eps.size else eps
        inactive[kept] = False
        evidence = int(kept.size)
    unconsolidated = outlived = 0
    if cfg.keep_unconsolidated:
        for i in np.flatnonzero(inactive & (nd.kind == KIND_EPISODE)).tolist():
            meta = nd.meta[i]
            if meta.get("forgotten"):
                continue  # a fact drawn from it was forgotten on purpose: the turn goes with it
            if not meta.get("consolidated"):
                unconsolidated += 1
            elif not g._cited_by_valid_fact(i):
                outlived += 1  # every fact drawn from it decayed or was superseded: the turn is their record
            else:
                continue
            inactive[i] = False
    # isolated: no alive edge at all. A superseded fact is history (recall returns it for questions about the
    # past), so its ends are not isolated: the old value went with the next tick's prune before, history and all
    kept_edges = np.flatnonzero(ed.alive)
    deg_all = np.bincount(ed.src[kept_edges], minlength=nd.n) + np.bincount(ed.dst[kept_edges], minlength=nd.n)
    isolated = free & (nd.kind == KIND_ENTITY) & (deg_all == 0) & ((g.tick - nd.created) >= cfg.isolated_grace)
    n_inactive = int(inactive.sum())
    n_isolated = int((isolated & ~inactive).sum())
    g._kill_nodes(np.flatnonzero(inactive | isolated))
    cap_nodes = cap_edges = 0
    if cfg.max_nodes is not None:
        alive = np.flatnonzero(nd.alive)
        excess = alive.size - cfg.max_nodes
        if excess > 0:
            cand = alive[~nd.permanent[alive] & ~_permanent_ends(g)[alive]]
            if cfg.keep_evidence:  # the last evidence of a valid fact stays (it goes once its facts do)
                eps = cand[nd.kind[cand] == KIND_EPISODE]
                cand = np.setdiff1d(cand, g._evidence_to_keep(eps), assume_unique=True)
            order = np.lexsort((cand, nd.last_access[cand], nd.importance[cand]))
            cap_nodes = g._kill_nodes(cand[order[:excess]])
    if cfg.max_edges is not None:
        live = np.flatnonzero(_live(g))
        excess = live.size - cfg.max_edges
        if excess > 0:
            cand = live[~ed.permanent[live]]
            order = np.lexsort((cand, ed.last_used[cand], ed.strength[cand]))
            cap_edges = g._kill_edges(cand[order[:excess]])
    return {"weak_edges": n_weak, "salient_kept": n_kept, "inactive_nodes": n_inactive,
            "isolated_nodes": n_isolated, "evidence_kept": evidence, "unconsolidated_kept": unconsolidated,
            "outlived_kept": outlived,
            "capacity_nodes": cap_nodes,
            "capacity_edges": cap_edges}


STEPS = {
    "hebbian": hebbian,
    "decay": decay,
    "game_of_life": game_of_life,
    "kcore": kcore,
    "scc": scc,
    "solidify": solidify,
    "promote": promote,
    "prune": prune,
}


def maintain(g, steps: Sequence[str] | None = None) -> MaintainReport:
    """One tick (unlogged; :meth:`LiquidGraph.maintain` logs it).

    Parameters
    ----------
    g : LiquidGraph
    steps : sequence of str, optional
        Run exactly these steps (in :data:`STEPS` order) instead of the ones enabled in
        ``g.config.dynamics``.

    Returns
    -------
    MaintainReport
    """
    cfg = g.config.dynamics
    if steps is None:
        names = [s for s in STEPS if getattr(cfg, s)]
    else:
        bad = [s for s in steps if s not in STEPS]
        if bad:
            raise ValueError(f"unknown maintain steps {bad}; known: {list(STEPS)}")
        names = [s for s in STEPS if s in set(steps)]
    rep = MaintainReport(tick=g.tick)
    for name in names:
        t0 = _time.perf_counter()
        rep.steps[name] = STEPS[name](g, cfg)
        rep.seconds[name] = _time.perf_counter() - t0
    g.tick += 1
    rep.n_nodes = int(g.nodes.alive.sum())
    rep.n_edges = int(_live(g).sum())
    return rep
