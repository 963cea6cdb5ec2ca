"""Recall: hybrid anchors, coverage-maximising anchor choice, bounded traversal, scoring.

For each query, with ``A = max(n_anchors, ceil(anchors_per_k * k))`` anchors (``anchors_per_k =
0``: ``n_anchors``), so that ``k`` items can be found even where anchors have no edges (a memory of
episodes only):

1. **over-query** ``overquery * A`` candidate nodes per block (entities, and episodes when
   ``include_episodes``): the block's cosine top list united with its BM25 top list (a lexical
   index of the node texts, :mod:`mags_lib.graph.lexical`), each scored by the *hybrid* score
   ``(1 - w) * cos + w * top_cos * bm25 / top_bm25`` (``w = lexical_weight``; ``w = 0``: cosine
   alone) and, for an episode, lifted by its *context* -- the best score of the episodes
   observed up to ``episode_window`` places before and after it (default 2: a reply after an
   aside): ``max(own, (1 - c) * own + c * near)``, ``c = episode_context`` (their neighbours are
   candidates too); the two blocks' lists are merged,
   best first (see :class:`_Relevance`);
2. **choose anchors** greedily, query-aware and coverage-maximising (the seed's "convex hull"
   idea): the reach of a candidate is itself plus its 1-hop neighbours; each round picks the
   candidate with the largest gain ``sim * ((1 - w) + w * |reach - covered| / |reach|)`` where
   ``w = coverage_weight``, so a candidate whose neighbourhood another anchor already covers loses
   up to ``w`` of its similarity;
3. **traverse** from each anchor, breadth-first or depth-first, following at most ``max_branch``
   edges per node while the product of edge strengths along the path stays at or above
   ``min_path_strength`` (and at most ``max_depth`` hops; at most ``max_visits`` edges per anchor
   and ``max_total_visits`` per query, shared evenly by its anchors). Out of a
   node with more followable edges than ``max_branch`` (a hub), the branch choice is query-aware:
   the edges with the best ``(1 - b) * strength + b * cos(query, e_relation + e_neighbour)``, ``b =
   branch_query_weight``, so a weak fact that answers the query is not crowded out by strong ones
   that do not (``b = 0``: the strongest, the ablation). The extra cost is one product per hub
   edge; elsewhere edges are taken strongest first;
4. **score** every reached fact edge and episode:
   ``((1 - r) * anchor_sim * path_weight + r * relevance) * (1 + confidence) / 2`` with ``r =
   relevance_weight``, ``path_weight`` the product of strengths from the anchor to the item (the
   fact's own edge included) and ``relevance`` the cosine between the query and the composite
   vector ``e_subject + e_relation + e_object`` (the episode's own vector for an episode), made
   hybrid like the anchors' (a fact's BM25: its subject, relation and object's text; an episode's
   with its context). With ``source_weight`` = s > 0 a fact's relevance is *grounded* in the turns
   that said it: ``(1 - s) * own + s * best``, ``best`` the best relevance of the alive episodes in
   its provenance (a fact that matches the query by a name alone, said in a turn about something
   else, falls; one said in a relevant turn rises; with no alive episode it keeps its own). With
   several queries, each chooses its anchors and traverses on its own (a node may anchor more than
   one), every (item, query) pair a query's paths reached is scored against that query, and the
   item keeps its best score over them: a recall does not depend on the order of its queries, and
   an extra query never lowers an item's score (unless it turns history on: below). A year named by any query weighs down the items
   outside every named year;
   The best ``A`` episode candidates of each query are scored as anchors are even when entity
   anchors took their places (``candidate_episodes``): an episode's score does not depend on being
   a traversal start, and without it a memory with entities lost its best episodes to them (on
   LoCoMo, 1.7 of 10 anchors were entities);
5. **route** between the blocks: at most ``ceil(share * k)`` episodes, unless there are too few
   facts to fill ``k``; ``share`` is ``max_episode_share``, or with ``episode_share_by_memory``
   ``1 - ceil(f * k) / k`` when that is larger, ``f`` the facts' share of the memory's alive
   episodes and valid facts (superseded ones too when history is recalled): a long conversation
   the writer drew few facts from keeps for facts the places its facts' share gives them, rounded
   up (conv-30 of LoCoMo holds 369 episodes and 32 facts, and half of k for facts gave most places
   to facts whose source was not the question's evidence). A memory whose facts are fewer than
   ``min_fact_share`` (0.3) of it, a memory of episodes, reserves no place for facts: facts, grounded
   in their turns (point 4), and turns are ranked by score alone. LoCoMo's write-model memories hold
   9-24 % facts, and even a reserve of 1-3 of 10 places gave them to facts said in other turns than
   the question's evidence (evidence R@10 0.727 -> 0.752); the game's scenarios (median 44 % facts)
   and other fact-rich memories keep it, so a fact drawn from a turn is returned beside that turn
   (without a reserve the turn outscores its own fact) and a query about the past keeps its
   superseded facts and their intervals (README, LoCoMo).

``RecallConfig(anchors_per_k=0, lexical_weight=0, episode_context=0)`` is recall as it was before
hybrid anchors (the same items, scores and traces: the ablation). On LoCoMo with a memory of
episodes only it found 0.30 of the evidence at k = 10 whatever k was, the defaults 0.77 (see
the README, LoCoMo).

Only alive, valid edges are in the traversable structure, so traversal never follows a superseded
fact. **History** (``RecallConfig.history`` or the ``history`` argument): when a query asks about the
past (:func:`asks_about_past`: "What did blorps eat before?", "Where did she use to live?", "What did
X eat in 2022?"), or always with ``history="on"``, the superseded facts (alive, ``valid=False``) whose
subject or object was reached join the candidates, scored like facts (path weight to their endpoint
times their own strength), multiplied by ``history_weight`` unless the query asks about the past, and
returned with ``current=False`` and their validity interval (``valid_from`` / ``valid_to``). With the
default ``"auto"`` an ordinary query never returns them, so current facts come first. A query naming a
year multiplies by ``year_weight`` the score of every item whose interval (an episode: its time) misses
that year. Superseded facts are never touched nor co-activated by a recall.
Every tie (equal strengths out of a node, equal scores) is broken by id, never by the order of the
networkx adjacency, so a graph recalls the same whatever its history (live, loaded, rolled back,
replayed).
With ``touch`` the returned nodes and edges get their access counts and times updated; with
``coactivation`` the edges on returned paths and the pairs of anchors are recorded for the
Hebbian step of the next :meth:`LiquidGraph.maintain`.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence

import numpy as np

from .config import RecallConfig
from .lexical import text_tokens, tokenize
from .model import Anchor, Recall, RecallItem, RecallTrace, TracePath
from .store import EDGE_FACT, KIND_EPISODE
from .values import clean_int

__all__ = ["asks_about_past", "choose_anchors", "recall", "year_window", "year_windows"]

_YEAR = re.compile(r"(?<![\d$€£.,])\b(1[89]\d\d|2[01]\d\d)\b(?![.,]\d)")
# a count, not a year: "2000 meters", "1500 km", "2000 points" (a unit or a plural noun after the number)
_NOT_YEAR_AFTER = re.compile(
    r"\s*(?:(?:km|m|cm|mm|kg|g|mg|lb|lbs|ft|mi|ml|l|kcal|k|h|hrs?|mins?|mph|kph|%)\b|(?!(?:was|has|does|is|"
    r"this|his|its|plus|less|besides|always|perhaps|across|unless|whereas|sometimes|as|us|yes)\b)[a-z]{2,}s\b)",
    re.IGNORECASE)


def year_window(query: str) -> tuple[str, str] | None:
    """The year a query names, as an ISO interval ``(first day, last day)``, or None.

    >>> year_window("What did blorps eat in 2022?"), year_window("What do blorps eat?")
    (('2022-01-01', '2022-12-31'), None)

    A number followed by a unit or a plural noun counts something, a price or decimal is no year:

    >>> year_window("How far does she run, 2000 meters?"), year_window("Was it $1999 or 2,000?")
    (None, None)
    >>> year_window("Where was she in 2019 and 2000 steps later?")
    ('2019-01-01', '2019-12-31')

    A query naming several years gets the first; :func:`year_windows` gives them all.
    """
    ws = year_windows(query)
    return ws[0] if ws else None


_YEAR_RANGE = re.compile(r"\b(?:between|from)\s+(\d{4})\s+(?:and|to|until|till)\s+(\d{4})\b", re.IGNORECASE)


def year_windows(query: str) -> list[tuple[str, str]]:
    """Every year a query names, as ISO intervals, in order; "between 2019 and 2021" / "from 2019 to 2021" is one
    interval over the years between.

    >>> year_windows("Where did Mel live in 2020 or 2021?")
    [('2020-01-01', '2020-12-31'), ('2021-01-01', '2021-12-31')]
    >>> year_windows("Where did Mel live between 2019 and 2021?"), year_windows("What do blorps eat?")
    ([('2019-01-01', '2021-12-31')], [])
    """
    years = [m for m in _YEAR.finditer(query) if not _NOT_YEAR_AFTER.match(query, m.end())]
    out: list[tuple[str, str]] = []
    spanned: set[int] = set()
    for r in _YEAR_RANGE.finditer(query):
        inside = [m for m in years if m.start() in (r.start(1), r.start(2))]
        if len(inside) == 2:
            lo, hi = sorted((r.group(1), r.group(2)))
            out.append((f"{lo}-01-01", f"{hi}-12-31"))
            spanned |= {m.start() for m in inside}
    out += [(f"{m.group(1)}-01-01", f"{m.group(1)}-12-31") for m in years if m.start() not in spanned]
    return list(dict.fromkeys(sorted(out, key=lambda w: query.find(w[0][:4]))))


def asks_about_past(query: str, markers: frozenset[str] | None = None) -> bool:
    """Whether a query asks about the past: one of ``markers`` as whole words, a year, or "did ... use to".

    ``markers`` default to :data:`~mags_lib.graph.config.DEFAULT_PAST_MARKERS`; both sides are
    compared after :func:`~mags_lib.graph.core.norm_key`. "use to" counts only after "did" ("Where did Mel
    use to live?"): "What does Caroline use to get around?" asks about now.

    >>> asks_about_past("What does Caroline use to get around?"), asks_about_past("Didn't she use to swim?")
    (False, True)

    >>> asks_about_past("What did blorps eat before?"), asks_about_past("Where did Mel use to live?")
    (True, True)
    >>> asks_about_past("What did X eat in 2022?"), asks_about_past("What do blorps eat?")
    (True, False)
    >>> asks_about_past("Who was the beforehand guest?")  # whole words only
    False
    >>> asks_about_past("What does she eat before work?"), asks_about_past("Where was he before Lima?")
    (False, True)
    """
    from .config import DEFAULT_PAST_MARKERS
    from .core import norm_key

    if year_window(query) is not None:
        return True
    text = f" {norm_key(query)} "
    if re.search(r" did(?:n ?t| not)? (?:\w+ ){0,4}use to ", text):
        return True
    found = [k for k in map(norm_key, DEFAULT_PAST_MARKERS if markers is None else markers) if f" {k} " in text]
    if found == ["before"]:  # alone, "before" asks about the past at the end of the question ("What did she
        # eat before?") or beside a verb in the past; "What does she do before work?" asks about a habit
        return text.endswith(" before ") or re.search(r" (?:did|was|were|had|used)(?:n ?t)? ", text) is not None
    return bool(found)


def _in_window(start: str | int | None, end: str | int | None, window: tuple[str, str]) -> bool:
    """Whether an interval of ISO times (``end`` None: still open) meets ``window``; unknown: True."""
    from .values import is_iso_time

    if not isinstance(start, str) or not is_iso_time(start):
        return True
    if start[:10] > window[1]:
        return False
    return not (isinstance(end, str) and is_iso_time(end) and end[:10] < window[0])


def choose_anchors(candidates: Sequence[int], similarities: Sequence[float], reach: Sequence[set],
                   n_anchors: int, *, coverage_weight: float = 0.5, min_similarity: float = 0.0,
                   covered: set | None = None) -> list[tuple[int, float, float]]:
    """Greedy query-aware max-coverage choice of anchors.

    Parameters
    ----------
    candidates : sequence of int
        Candidate node ids.
    similarities : sequence of float
        Their cosine similarity to the query.
    reach : sequence of set
        The nodes each candidate covers (itself and its neighbours).
    n_anchors : int
        How many to choose.
    coverage_weight : float
        0 ranks by similarity alone; 1 scales similarity entirely by the uncovered share.
    min_similarity : float
        Candidates below are never chosen.
    covered : set, optional
        Nodes already covered (by anchors chosen before this call); updated in place.

    Returns
    -------
    list of (candidate, similarity, gain)

    Examples
    --------
    Two near-identical candidates covering the same nodes and a less similar one elsewhere: the
    second anchor is the one that covers new ground.

    >>> choose_anchors([1, 2, 3], [0.9, 0.88, 0.6], [{1, 2, 5}, {1, 2, 5}, {3, 7}], 2)
    [(1, 0.9, 0.9), (3, 0.6, 0.6)]
    """
    covered = set() if covered is None else covered
    left = [i for i in range(len(candidates)) if similarities[i] >= min_similarity]
    out: list[tuple[int, float, float]] = []
    w = coverage_weight
    while left and len(out) < n_anchors:
        best, best_gain = None, -np.inf
        for i in left:
            r = reach[i]
            new = len(r - covered) / len(r) if r else 0.0
            gain = similarities[i] * ((1.0 - w) + w * new)
            if gain > best_gain:
                best, best_gain = i, gain
        left.remove(best)
        covered |= reach[best]
        out.append((candidates[best], float(similarities[best]), float(best_gain)))
    return out


def _branch_relevance(g, q: np.ndarray, eids: np.ndarray, nbrs: np.ndarray) -> np.ndarray:
    """Cosine between query ``q`` and ``e_relation + e_neighbour`` for each edge out of one node.

    The node itself is left out: every edge out of it shares it, so it would not tell them apart.
    """
    R = g._rel_emb[g.edges.rel[eids]]
    V = g._emb[nbrs]
    return (R @ q + V @ q) / np.sqrt(np.maximum(2.0 + 2.0 * np.einsum("ij,ij->i", R, V), 1e-9))


def recall(g, query: str | Sequence[str], k: int = 10, query_embeddings: np.ndarray | None = None,
           config: RecallConfig | None = None, history: bool | None = None) -> Recall:
    """Recall from graph ``g`` (the :meth:`LiquidGraph.recall` logic, unlogged).

    Parameters
    ----------
    g : LiquidGraph
    query : str or sequence of str
        One query or several (multi-query); items keep their best score over the queries.
    k : int
        Items returned.
    query_embeddings : ndarray, optional
        Precomputed L2-normalised query vectors, shape (n_queries, dim); skips the embedder.
    config : RecallConfig, optional
        Overrides ``g.config.recall`` for this call.
    history : bool, optional
        True: superseded facts are candidates, scored as if the query asked about the past; False:
        never; None: ``config.history`` decides (see the module docstring).

    Returns
    -------
    Recall
        ``items`` (best first) and ``trace``.
    """
    cfg = config or g.config.recall
    queries = [query] if isinstance(query, str) else list(query)
    if not queries or not all(isinstance(q, str) for q in queries):
        raise ValueError("recall needs a query string or a non-empty list of query strings")
    k = clean_int(k, "k", minimum=1)
    if query_embeddings is None:
        Q = g._encode(queries)
    else:
        Q = np.asarray(query_embeddings, dtype=np.float32)
        if Q.ndim == 1:
            Q = Q[None, :]
        if Q.shape != (len(queries), g.dim):
            raise ValueError(f"query_embeddings has shape {Q.shape}, expected ({len(queries)}, {g.dim})")
    trace = RecallTrace(queries=queries)
    nd, ed, G = g.nodes, g.edges, g.G
    succ, pred = G._succ, G._pred
    strength = ed.strength
    emb = g._emb
    n_anchors = cfg.n_anchors
    if cfg.anchors_per_k > 0:  # anchors scale with k: a memory whose anchors have no edges still fills k
        n_anchors = max(n_anchors, int(np.ceil(cfg.anchors_per_k * k - 1e-9)))
    n_cand = cfg.overquery * n_anchors

    ent_hits = g._ent_index.search(Q, n_cand, emb)
    ep_hits = g._ep_index.search(Q, n_cand, emb) if cfg.include_episodes else None
    rel_ = _Relevance(g, queries, Q, cfg, ent_hits, ep_hits)

    anchors: list[tuple[int, int, float]] = []  # (node, query, sim)
    ep_cands: list[tuple[int, np.ndarray, np.ndarray]] = []  # (query, best episode candidates, their sims)
    for qi in range(len(queries)):
        rows, sims = rel_.candidates(g, qi, *ent_hits[qi], "ent", n_cand)
        if ep_hits is not None:
            erows, esims = rel_.candidates(g, qi, *ep_hits[qi], "ep", n_cand)
            if erows.size:
                rows = np.concatenate([rows, erows])
                sims = np.concatenate([sims, esims])
                order = np.lexsort((rows, -sims))[:n_cand]
                rows, sims = rows[order], sims[order]
        if ep_hits is not None and cfg.candidate_episodes and erows.size:
            ep_cands.append((qi, erows[:n_anchors], esims[:n_anchors]))
        cand = [int(r) for r in rows.tolist()]
        csim = [float(s) for s in sims.tolist()]
        for r, s in zip(cand, csim):
            trace.candidates.append((g.node_id(r), qi, s))
        reach = [set(succ[c]) | set(pred[c]) | {c} for c in cand]
        # each query chooses its anchors on its own (a node can anchor several queries): what one query
        # recalls never depends on the queries sent before it
        picked = choose_anchors(cand, csim, reach, n_anchors, coverage_weight=cfg.coverage_weight,
                                min_similarity=cfg.min_anchor_similarity)
        for node, sim, gain in picked:
            anchors.append((node, qi, sim))
            trace.anchors.append(Anchor(g.node_id(node), nd.text[node], qi, sim, gain))

    # -- traversal -----------------------------------------------------------------------------
    both = cfg.direction == "both"
    thr = cfg.min_path_strength
    max_depth, max_branch = cfg.max_depth, cfg.max_branch
    # the query's visit budget is shared by its anchors (4 anchors: 64 each, as before anchors scaled with k)
    max_visits = min(cfg.max_visits, max(1, cfg.max_total_visits // n_anchors))
    bq = cfg.branch_query_weight
    dfs = cfg.traversal == "dfs"
    with_eps = cfg.include_episodes
    # (key, query) -> (weight, anchor_sim, query, path nodes, path edges); key: edge id (fact) or -1 - node
    # (episode). Every item is kept per query that reached it and scored against each (below): it keeps its
    # best score over the queries, whatever their order
    reached: dict[tuple[int, int], tuple] = {}
    node_w: dict[int, float] = {}
    edge_w: dict[int, float] = {}
    kinds = nd.kind
    ekind = ed.kind
    for a, qi, asim in anchors:
        node_w[a] = 1.0
        old = reached.get((-1 - a, qi))
        if kinds[a] == KIND_EPISODE and (old is None or asim > old[0] * old[1]):  # a better path may have reached it
            reached[(-1 - a, qi)] = (1.0, asim, qi, (a,), ())
        visits = 0
        frontier = deque([(a, (a,), (), 1.0)])
        pop = frontier.pop if dfs else frontier.popleft
        seen_edges: set = set()
        while frontier and visits < max_visits:
            u, pnodes, pedges, w = pop()
            if len(pedges) >= max_depth:
                continue
            inc = [(e, v) for v, kd in succ[u].items() for e in kd]
            if both:
                inc += [(e, v) for v, kd in pred[u].items() for e in kd]
            # only what the path can follow competes for the max_branch slots: the edge it came by (and any
            # edge back into the path) would take one and be dropped after the cut
            inc = [(e, v) for e, v in inc if e not in seen_edges and v not in pnodes]
            if not inc:
                continue
            if len(inc) > 1:
                eids = np.fromiter((e for e, _ in inc), dtype=np.int64, count=len(inc))
                ws = strength[eids]
                ok = np.flatnonzero(ws * w >= thr)  # edges the path can still follow
                if ok.size > max_branch and bq > 0.0:
                    key = (1.0 - bq) * ws[ok] + bq * _branch_relevance(
                        g, Q[qi], eids[ok], np.fromiter((inc[j][1] for j in ok.tolist()), dtype=np.int64))
                else:  # strongest first (the order when every edge fits, and the ablation)
                    key = ws[ok]
                # best first; ties by edge id (a property of the data, not of history)
                order = ok[np.lexsort((eids[ok], -key))[:max_branch]].tolist()
                cand = [(inc[j][0], inc[j][1], float(ws[j]) * w) for j in order]
            else:
                w2 = float(strength[inc[0][0]]) * w
                cand = [(inc[0][0], inc[0][1], w2)] if w2 >= thr else []
            nexts = []
            for e, v, w2 in cand:
                if e in seen_edges or v in pnodes:
                    continue
                seen_edges.add(e)
                visits += 1
                nn, ne = pnodes + (v,), pedges + (e,)
                if w2 > edge_w.get(e, 0.0):
                    edge_w[e] = w2
                if w2 > node_w.get(v, 0.0):
                    node_w[v] = w2
                if ekind[e] == EDGE_FACT:
                    old = reached.get((e, qi))
                    if old is None or w2 * asim > old[0] * old[1]:
                        reached[(e, qi)] = (w2, asim, qi, nn, ne)
                if with_eps and kinds[v] == KIND_EPISODE:
                    old = reached.get((-1 - v, qi))
                    if old is None or w2 * asim > old[0] * old[1]:
                        reached[(-1 - v, qi)] = (w2, asim, qi, nn, ne)
                nexts.append((v, nn, ne, w2))
                if visits >= max_visits:
                    break
            if dfs:
                nexts.reverse()  # best explored first
            frontier.extend(nexts)
    # the best episode candidates are results whether or not they were chosen as anchors (entity anchors
    # take anchor places, but an episode's score does not depend on being a traversal start)
    for qi, erows, esims in ep_cands:
        for r, s in zip(erows.tolist(), esims.tolist()):
            if s < cfg.min_anchor_similarity:
                continue
            old = reached.get((-1 - r, qi))
            if old is None or s > old[0] * old[1]:
                reached[(-1 - r, qi)] = (1.0, float(s), qi, (r,), ())
    euid = ed.uid  # the trace and the items name edges by id, not by row
    trace.edge_weights = {int(euid[e]): float(w) for e, w in edge_w.items()}
    trace.node_weights = {g.node_id(n): float(w) for n, w in node_w.items()}

    # -- history: superseded facts at the nodes reached -------------------------------------------
    past = any(asks_about_past(q, cfg.past_markers) for q in queries)
    with_history = (past if cfg.history == "auto" else cfg.history == "on") if history is None else bool(history)
    past = past or history is True
    if with_history:
        _add_history(g, reached, anchors)

    # -- scoring (vectorised over the reached items) ---------------------------------------------
    lam = cfg.relevance_weight
    pairs = list(reached)
    keys = [x for x, _ in pairs]
    scores = np.zeros(0)
    if keys:
        vals = [reached[x] for x in pairs]
        w_arr = np.array([v[0] for v in vals])
        a_arr = np.array([v[1] for v in vals])
        q_arr = np.array([v[2] for v in vals], dtype=np.int64)
        karr = np.array(keys, dtype=np.int64)
        is_fact = karr >= 0
        rel = np.zeros(len(keys))
        conf = np.zeros(len(keys))
        if is_fact.any():
            fe = karr[is_fact]
            fs, fo, fr = ed.src[fe], ed.dst[fe], ed.rel[fe]
            S, R, O = emb[fs], g._rel_emb[fr], emb[fo]
            qf = Q[q_arr[is_fact]]
            dots = (S * qf).sum(1) + (R * qf).sum(1) + (O * qf).sum(1)
            pair = (S * R).sum(1) + (S * O).sum(1) + (R * O).sum(1)
            # cosine between the query and the composite vector e_s + e_r + e_o
            rel[is_fact] = rel_.fact(g, dots / np.sqrt(np.maximum(3.0 + 2.0 * pair, 1e-9)), q_arr[is_fact], fe)
            if cfg.source_weight > 0.0 and with_eps:
                rel[is_fact] = _grounded(g, rel_, rel[is_fact], fe, q_arr[is_fact], cfg.source_weight)
            conf[is_fact] = ed.confidence[fe]
        if (~is_fact).any():
            ne_ = -1 - karr[~is_fact]
            rel[~is_fact] = rel_.episode(ne_, q_arr[~is_fact])
            conf[~is_fact] = nd.confidence[ne_]
        scores = ((1.0 - lam) * a_arr * w_arr + lam * rel) * (0.5 + 0.5 * conf)
        if with_history and not past:
            scores[is_fact] *= np.where(ed.valid[karr[is_fact]], 1.0, cfg.history_weight)
        # the years any query names: an item outside all of them is weighed down (the question names the
        # year; the ask model's queries may not)
        windows = [w for q in queries for w in year_windows(q)]
        if windows:
            for j, x in enumerate(keys):
                iv = _interval(g, x)
                if not any(_in_window(*iv, w) for w in windows):
                    scores[j] *= cfg.year_weight
    # each item keeps its best score over the queries that reached it (ties: the query's text, then its index)
    best_of: dict[int, int] = {}
    for j, (x, qi) in enumerate(pairs):
        b = best_of.get(x)
        if b is None or (-scores[j], queries[qi], qi) < (-scores[b], queries[pairs[b][1]], pairs[b][1]):
            best_of[x] = j
    order = sorted(best_of.values(), key=lambda j: (-scores[j], keys[j]))
    max_ep = int(np.ceil(cfg.max_episode_share * int(k)))
    if cfg.episode_share_by_memory and with_eps and max_ep < int(k):
        # a memory mostly of episodes (few facts drawn) keeps for facts only their share of it (rounded up)
        n_e = int(np.count_nonzero(nd.alive & (kinds == KIND_EPISODE)))
        n_f = int(np.count_nonzero(ed.alive & (ed.valid | with_history) & (ekind == EDGE_FACT)))
        f = n_f / (n_e + n_f) if n_e + n_f else 1.0
        if f < cfg.min_fact_share:
            max_ep = int(k)  # a memory of episodes: facts and episodes ranked by score alone
        elif n_e + n_f:
            max_ep = max(max_ep, int(k) - int(np.ceil(f * int(k) - 1e-9)))
    n_facts = sum(1 for x in best_of if x >= 0)
    max_ep = max(max_ep, int(k) - n_facts)  # routing: episodes fill what facts cannot
    picked, n_ep = [], 0
    for j in order:
        if len(picked) >= int(k):
            break
        if keys[j] < 0:
            if n_ep >= max_ep:
                continue
            n_ep += 1
        picked.append(j)
    items: list[RecallItem] = []
    src_a, dst_a, rel_a = ed.src, ed.dst, ed.rel
    for j in picked:
        key = keys[j]
        w, asim, qi, pn, pe = reached[pairs[j]]
        path = tuple(g.node_id(x) for x in pn)
        pe_ids = tuple(int(euid[e]) for e in pe)
        trace.paths.append(TracePath(path, pe_ids, float(w)))
        if key >= 0:
            s_, o_ = int(src_a[key]), int(dst_a[key])
            trip = (nd.text[s_], g._rel_text[rel_a[key]], nd.text[o_])
            start, end = _interval(g, key)
            items.append(RecallItem(text=" ".join(trip), triplet=trip, score=float(scores[j]),
                                    sources=tuple(ed.sources[key]), path=path, kind="fact", edges=pe_ids,
                                    edge_id=int(euid[key]), current=bool(ed.valid[key]), valid_from=start,
                                    valid_to=end))
        else:
            n = -1 - key
            src = nd.meta[n].get("source")
            items.append(RecallItem(text=nd.text[n], triplet=None, score=float(scores[j]),
                                    sources=() if src is None else (src,), path=path, kind="episode",
                                    edges=pe_ids, node_id=g.node_id(n), valid_from=nd.meta[n].get("time")))

    # -- side effects --------------------------------------------------------------------------
    if items and (cfg.touch or cfg.coactivation):
        rows = [reached[pairs[j]] for j in picked]  # (weight, sim, query, path rows, path edge rows)
        used_edges = sorted(e for e in {e for r in rows for e in r[4]} | {keys[j] for j in picked if keys[j] >= 0}
                            if ed.valid[e])
        # a superseded fact is never touched nor co-activated: nor is the node only it reaches (its old object)
        stale = [keys[j] >= 0 and not ed.valid[keys[j]] for j in picked]
        used_nodes = sorted({x for r, old in zip(rows, stale) for x in (r[3][:-1] if old else r[3])})
        if cfg.touch:
            ue = np.asarray(used_edges, dtype=np.int64)
            un = np.asarray(used_nodes, dtype=np.int64)
            ed.last_used[ue] = g.tick
            ed.uses[ue] += 1
            nd.last_access[un] = g.tick
            nd.access[un] += 1
        if cfg.coactivation and g.config.dynamics.hebbian:  # nothing would ever consume it otherwise
            ed.activation[np.asarray(used_edges, dtype=np.int64)] += 1.0
            # entity anchors that produced results: episodes belong to the episodic block and are
            # never wired to each other or to entities by association
            anc = sorted({a for a in (r[3][0] for r, old in zip(rows, stale) if not old)
                          if nd.kind[a] != KIND_EPISODE})
            cap = g.config.limits.max_coactivation
            for i in range(len(anc)):
                for j in range(i + 1, len(anc)):
                    g._coact.append((anc[i], anc[j]))
            if len(g._coact) > cap:  # bounded while maintain() does not run: the oldest pairs go
                del g._coact[: len(g._coact) - cap]
    return Recall(items=items, trace=trace)


class _Relevance:
    """How relevant a node is to each query of one recall call: the hybrid and context parts.

    * **hybrid** (``RecallConfig.lexical_weight`` = w > 0 and a lexical index kept): a node's score
      is ``(1 - w) * cos + w * top_cos * bm25 / top_bm25``, with ``top_bm25`` the best BM25 score
      in the node's block and ``top_cos`` the best cosine among the query's candidates (so the
      lexical part lives on the cosine scale and min_anchor_similarity keeps its meaning); a fact's
      BM25 is its text's (subject, relation, object) with the entity block's statistics (see
      :meth:`fact`). A block's candidates are its cosine top list united with its BM25 top list;
    * **context** (``RecallConfig.episode_context`` = c > 0): an episode's relevance is ``max(own,
      (1 - c) * own + c * near)``, ``near`` the best own score of its neighbours in observation
      order (the alive episodes up to ``RecallConfig.episode_window`` places before and after it;
      rows grow with time and compaction keeps their order), so a turn is lifted by a relevant
      neighbour and never lowered by an irrelevant one; the neighbours of the block's candidates
      are candidates too.

    Both off, nothing changes: candidates and relevances are the index's cosines, as before.
    """

    def __init__(self, g, queries: list[str], Q: np.ndarray, cfg: RecallConfig, ent_hits, ep_hits):
        self.w = float(cfg.lexical_weight) if g.config.index.lexical else 0.0
        self.c = float(cfg.episode_context) if ep_hits is not None else 0.0
        self.window = int(cfg.episode_window)
        self.emb, self.Q = g._emb, Q
        self.ep_rows = g._ep_index.members() if self.c > 0.0 else None  # alive episodes, in observation order
        self.block: dict[tuple[int, str], np.ndarray] = {}  # (query, block) -> bm25 / the block's best
        if self.w == 0.0:
            return
        n = g.nodes.n
        self.share = np.zeros((len(queries), n))  # bm25 / the block's best, both blocks in one row
        self.top_cos = np.zeros(len(queries))
        self.top_ent = np.zeros(len(queries))  # the best entity's bm25 (a fact's bm25 is divided by it)
        self.stop = g.config.index.lexical_stopwords
        self.tokens = [tokenize(q, self.stop) for q in queries]
        self.k1, self.b = cfg.bm25_k1, cfg.bm25_b
        blocks = [("ent", g._ent_lex)] + ([("ep", g._ep_lex)] if ep_hits is not None else [])
        for qi, q in enumerate(queries):
            best = [float(h[qi][1][0]) for h in (ent_hits, ep_hits) if h is not None and h[qi][1].size]
            self.top_cos[qi] = max(max(best, default=0.0), 0.0)
            for name, index in blocks:
                sc = index.scores(q, n, cfg.bm25_k1, cfg.bm25_b)
                if sc is not None:
                    if name == "ent":
                        self.top_ent[qi] = sc.max()
                    sc /= sc.max()
                    self.block[qi, name] = sc
                    self.share[qi] += sc  # the blocks' rows are disjoint

    def candidates(self, g, qi: int, rows: np.ndarray, sims: np.ndarray, block: str, n_cand: int):
        """A block's candidates for query ``qi`` from its cosine top list (``rows``, ``sims``): with
        the BM25 top list and the episodes' neighbours added, rescored, best first (ties by row),
        ``n_cand`` at most."""
        ctx = block == "ep" and self.c > 0.0
        if self.w == 0.0 and not ctx:
            return rows, sims
        if self.w > 0.0:
            index = g._ent_lex if block == "ent" else g._ep_lex
            rows = np.union1d(rows, index.top(self.block.get((qi, block)), n_cand)[0])
        if ctx and rows.size:
            nbs = np.concatenate(self._neighbours(rows))
            rows = np.union1d(rows, nbs[nbs >= 0])
        if rows.size == 0:
            return rows, np.zeros(0)
        qs = np.full(rows.size, qi)
        score = self.episode(rows, qs) if block == "ep" else self.fuse(self.emb[rows] @ self.Q[qi], qs, rows)
        order = np.lexsort((rows, -score))[:n_cand]
        return rows[order], score[order]

    def fuse(self, cos: np.ndarray, qs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The hybrid score of node ``rows`` with cosines ``cos`` for queries ``qs``."""
        if self.w == 0.0:
            return cos
        return (1.0 - self.w) * cos + self.w * self.top_cos[qs] * self.share[qs, rows]

    def fact(self, g, cos: np.ndarray, qs: np.ndarray, edges: np.ndarray) -> np.ndarray:
        """The hybrid score of fact ``edges`` with composite cosines ``cos``: the BM25 of the fact's
        text (subject, relation, object) with the entity block's statistics, divided by the larger of
        the best entity's and the best of these facts' for the query."""
        if self.w == 0.0:
            return cos
        nd, ed = g.nodes, g.edges
        stop = self.stop
        docs = [text_tokens(nd.text[s], stop) + text_tokens(g._rel_text[r], stop) + text_tokens(nd.text[o], stop)
                for s, r, o in zip(ed.src[edges].tolist(), ed.rel[edges].tolist(), ed.dst[edges].tolist())]
        raw = np.zeros(len(docs))
        for qi in np.unique(qs).tolist():
            at = np.flatnonzero(qs == qi)
            raw[at] = g._ent_lex.score_tokens(self.tokens[qi], [docs[j] for j in at.tolist()], self.k1, self.b)
            top = max(self.top_ent[qi], raw[at].max(initial=0.0))
            if top > 0.0:
                raw[at] /= top
        return (1.0 - self.w) * cos + self.w * self.top_cos[qs] * raw

    def _own(self, rows: np.ndarray, qs: np.ndarray) -> np.ndarray:
        return self.fuse((self.emb[rows] * self.Q[qs]).sum(1), qs, rows)

    def _neighbours(self, rows: np.ndarray) -> list[np.ndarray]:
        """The alive episodes observed up to ``window`` places before and after each episode row,
        one array per offset (-1: none)."""
        m = self.ep_rows
        pos = np.searchsorted(m, rows)
        out = []
        for d in range(1, self.window + 1):
            out.append(np.where(pos - d >= 0, m[np.maximum(pos - d, 0)], -1))
            out.append(np.where(pos + d < m.size, m[np.minimum(pos + d, m.size - 1)], -1))
        return out

    def episode(self, rows: np.ndarray, qs: np.ndarray) -> np.ndarray:
        """The relevance of episode ``rows`` to queries ``qs``: hybrid, with its context."""
        own = self._own(rows, qs)
        if self.c == 0.0:
            return own
        near = np.zeros(rows.size)
        for nb in self._neighbours(rows):
            near = np.maximum(near, np.where(nb >= 0, self._own(np.maximum(nb, 0), qs), 0.0))
        return np.maximum(own, (1.0 - self.c) * own + self.c * near)  # context lifts, never lowers


def _grounded(g, rel_: _Relevance, rel: np.ndarray, edges: np.ndarray, qs: np.ndarray, s: float) -> np.ndarray:
    """Fact relevances ``rel`` of fact ``edges`` (queries ``qs``) grounded in their source episodes:
    ``(1 - s) * rel + s * best``, ``best`` the best relevance (hybrid, with context) of the alive
    episodes in a fact's provenance; a fact none of whose episodes is alive keeps its own."""
    nd, eps = g.nodes, g.edges.episodes
    owner, rows = [], []
    for j, e in enumerate(edges.tolist()):
        for ep in eps[e]:
            r = g._ep_row(ep)
            if r >= 0 and nd.alive[r]:
                owner.append(j)
                rows.append(r)
    if not rows:
        return rel
    own = np.asarray(owner, dtype=np.int64)
    best = np.full(rel.size, -np.inf)
    np.maximum.at(best, own, rel_.episode(np.asarray(rows, dtype=np.int64), qs[own]))
    has = np.isfinite(best)
    out = rel.copy()
    out[has] = (1.0 - s) * rel[has] + s * best[has]
    return out


def _interval(g, key: int) -> tuple[str | int | None, str | int | None]:
    """Validity interval of a reached item: a fact edge's (time, else tick), an episode's time (key < 0)."""
    if key < 0:  # an episode: the moment it was said
        t = g.nodes.meta[-1 - key].get("time")
        return t, t
    ed = g.edges
    start = ed.valid_from_time[key] or int(ed.valid_from[key])
    end = None if ed.valid_to[key] < 0 else (ed.valid_to_time[key] or int(ed.valid_to[key]))
    return start, end


def _add_history(g, reached: dict, anchors: list) -> None:
    """Add to ``reached`` the superseded facts (alive, invalid) one of whose endpoints was reached.

    A superseded fact continues the best path that reached its endpoint (an anchor, or a node on a
    reached item's path): its weight is that path's weight times its own strength.
    """
    ed = g.edges
    best: dict[tuple[int, int], tuple] = {}  # (node, query) -> (weight, anchor sim, query, path nodes, path edges)

    def offer(node, w, asim, qi, pn, pe):
        old = best.get((node, qi))
        if old is None or w * asim > old[0] * old[1]:
            best[(node, qi)] = (w, asim, qi, pn, pe)

    for a, qi, asim in anchors:
        offer(a, 1.0, asim, qi, (a,), ())
    for w_item, asim, qi, pn, pe in list(reached.values()):
        w = 1.0
        for i, e in enumerate(pe):  # prefix weights along the item's path
            w *= float(ed.strength[e])
            offer(pn[i + 1], w, asim, qi, pn[: i + 2], pe[: i + 1])
    if not best:
        return
    cand = np.flatnonzero(ed.alive & ~ed.valid & (ed.kind == EDGE_FACT))
    if cand.size == 0:
        return
    mask = np.zeros(g.nodes.n, dtype=bool)
    mask[[n for n, _ in best]] = True
    cand = cand[mask[ed.src[cand]] | mask[ed.dst[cand]]]
    queries = sorted({qi for _, qi in best})
    for x in cand.tolist():
        s_, o_ = int(ed.src[x]), int(ed.dst[x])
        for qi in queries:  # per query, as every reached item
            ends = [(n, other) for n, other in ((s_, o_), (o_, s_)) if (n, qi) in best]
            if not ends:
                continue
            n, other = max(ends, key=lambda t: best[(t[0], qi)][0] * best[(t[0], qi)][1])
            w, asim, _, pn, pe = best[(n, qi)]
            if other in pn:
                continue
            reached[(x, qi)] = (w * float(ed.strength[x]), asim, qi, pn + (other,), pe + (x,))
