"""The :class:`LiquidGraph`: state, primitives, snapshots, diff and the operation log.

Storage layout
--------------
* nodes and edges are column stores (:mod:`.store`): numbers in numpy arrays so the dynamics are
  vectorised over all edges at once, text and provenance in Python lists. A row is internal; the
  ids the world sees (``n12``, ``ep3``, edge ``57``) are the rows' ``uid`` column, stable for the
  life of the graph: :meth:`LiquidGraph.compact` drops the rows pruning and merging left dead and
  renumbers the rest, the ids stay (until a store's first compaction an id is its row number);
* one contiguous float32 matrix holds every node embedding (row = node id) and a second one the
  relation-label embeddings; :class:`~.index.VectorIndex` objects search them (entities and
  episodes are separate blocks);
* a ``networkx.MultiDiGraph`` (``g.G``: node rows, edge key = edge row) holds the structure
  of the live memory -- alive nodes and alive, *valid* edges -- and serves traversal and the
  graph algorithms. Invalidated (superseded) edges stay in the stores for inspection but leave the
  networkx structure, so traversal never follows them (a query about the past gets them back as
  history, marked superseded: see :mod:`.recall`).

Time is a logical clock: ``g.tick`` counts ``maintain`` calls. Nothing reads the wall clock, so an
operation log replays to an identical graph.
Facts' validity intervals are in the observations' own times (the ``time`` given to
:meth:`LiquidGraph.add_episode` or :meth:`LiquidGraph.engram`), in ticks only where none was given.

Reliability contract
--------------------
* **Boundary**: every public operation validates and normalises its arguments first
  (:mod:`.values`: dates to ISO strings, numpy scalars to Python, text to valid UTF-8, node ids to
  their string form) and raises ``TypeError`` / ``ValueError`` / ``KeyError`` before changing
  anything; what was accepted is always savable and replays identically.
* **Order is data**: whatever the history of the networkx structure (live inserts, merges that
  re-add edges, rebuilds on load and rollback), every traversal breaks ties by node / edge id, so
  live, loaded, rolled-back and replayed graphs recall identically.
* **All or nothing**: :meth:`LiquidGraph.transaction` restores the whole state (stores, log,
  snapshots) if anything inside raises; ``MAGS.observe`` runs each turn inside one.
* **Bounded**: snapshots (count and bytes), the operation log (folded into a checkpointed base
  state, see :attr:`LiquidGraph.oplog_base`), the co-activation list and the dead rows of removed
  nodes and edges (:meth:`LiquidGraph.compact`, run by ``maintain``) are bounded by
  :class:`~.config.LimitsConfig`. Snapshots share the embedding rows (written once, never
  modified) and the list cells of the stores (replaced, never mutated in place, once a row exists).
"""

from __future__ import annotations

import base64
import contextlib
import numbers
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, replace

import networkx as nx
import numpy as np

from .config import GraphConfig, RecallConfig
from .index import VectorIndex
from .lexical import LexicalIndex
from .model import EngramReport, GraphDiff, MaintainReport, Recall, RecallItem
from .store import (
    EDGE_ARRAYS,
    EDGE_ASSOC,
    EDGE_FACT,
    EDGE_LISTS,
    EDGE_MENTION,
    KIND_ENTITY,
    KIND_EPISODE,
    NODE_ARRAYS,
    NODE_LISTS,
    STAGE_LONG,
    STAGE_WORKING,
    ColumnStore,
)
from .values import (chronological_order, clean_int, clean_source, clean_text, clean_time, clean_unit,
                     earliest_time, instant_key, is_iso_time)

__all__ = ["OPS", "LiquidGraph", "check_op", "norm_key"]

_PUNCT = re.compile(r"[^\w\s]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WS = re.compile(r"\s+")
EDGE_KIND_NAMES = {EDGE_FACT: "fact", EDGE_ASSOC: "association", EDGE_MENTION: "mention"}


def norm_key(text: str) -> str:
    """Normalised lookup key: lower case, punctuation and articles removed, whitespace collapsed.

    A text that would normalise to nothing (``"a"``, ``"?!"``) keeps its lower-cased form.

    >>> norm_key("  The Blue  Die! "), norm_key("A")
    ('blue die', 'a')
    """
    key = _KEY_CACHE.get(text) if type(text) is str else None
    if key is None:
        low = _WS.sub(" ", str(text).lower()).strip()
        s = _ARTICLES.sub(" ", _PUNCT.sub(" ", low))
        key = _WS.sub(" ", s).strip() or low
        if type(text) is str:
            if len(_KEY_CACHE) >= _KEY_CACHE_SIZE:  # bounded: start over rather than grow without limit
                _KEY_CACHE.clear()
            _KEY_CACHE[text] = key
    return key


_KEY_CACHE: dict[str, str] = {}  # text -> norm_key(text): engram normalises every mention of every call
_KEY_CACHE_SIZE = 1 << 17


class LiquidGraph:
    """A Liquid Knowledge Graph memory.

    Parameters
    ----------
    embedder : Embedder
        Anything with ``name``, ``dim`` and ``encode(texts) -> (n, dim)`` L2-normalised float32.
    config : GraphConfig, optional
        All knobs; see :mod:`mags_lib.graph.config`.
    seed : int, optional
        Seed for the layouts drawn by :mod:`mags_lib.graph.viz`. The memory itself is deterministic
        while search is exact (below ``IndexConfig`` ``approx_threshold`` nodes); above it, multi-threaded
        inserts into the approximate index may order the HNSW graph differently from run to run: set
        ``IndexConfig(threads=1)`` for bit-identical runs at scale.

    Examples
    --------
    >>> from mags_lib.embed import HashEmbedder
    >>> g = LiquidGraph(HashEmbedder(dim=64))
    >>> ep = g.add_episode("Blorps eat frozen lemons.", source="D1:3")
    >>> rep = g.engram([("blorps", "eat", "frozen lemons")], episode=ep)
    >>> [it.text for it in g.recall("what do blorps eat", k=2).items]
    ['Blorps eat frozen lemons.', 'blorps eat frozen lemons']
    """

    def __init__(self, embedder, config: GraphConfig | None = None, seed: int | None = None):
        for attr in ("dim", "encode"):
            if not hasattr(embedder, attr):
                raise TypeError(f"embedder must provide `name`, `dim` and `encode`; {type(embedder).__name__} "
                                f"lacks `{attr}` (see mags_lib.embed.Embedder)")
        self.embedder = embedder
        self.config = config if config is not None else GraphConfig()
        if not isinstance(self.config, GraphConfig):
            raise TypeError(f"config must be a GraphConfig, got {type(self.config).__name__}")
        self.seed = None if seed is None else clean_int(seed, "seed")
        self.dim = int(embedder.dim)
        self._reset()
        self._snapshots: dict[str, dict] = {}
        self._snap_counter = 0
        self._removal_sinks: list[list[dict]] = []  # open record_removed_facts() blocks (never saved)

    # ------------------------------------------------------------------------------------------
    # state
    def _reset(self) -> None:
        self.nodes = ColumnStore(NODE_ARRAYS, NODE_LISTS)
        self.edges = ColumnStore(EDGE_ARRAYS, EDGE_LISTS)
        self._emb = np.zeros((64, self.dim), dtype=np.float32)
        self._rel_text: list[str] = []
        self._rel_id: dict[str, int] = {}
        self._rel_emb = np.zeros((16, self.dim), dtype=np.float32)
        self._entity_key: dict[str, int] = {}
        self._coact: list[tuple[int, int]] = []  # anchor pairs co-activated since the last tick
        self._cites: dict[int, list[int]] = {}  # episode uid -> fact edge rows whose provenance named it
        # (derived, append-only: an entry may be stale, so every use checks the edge's provenance)
        self._rel_kind: dict[str, tuple[str, bool]] = {}  # relation -> (slot, single-valued): engram.relation_kind
        self.tick = 0
        self.oplog: list[dict] = []
        self.oplog_base: dict | None = None  # state the log starts from (None: the empty graph)
        self.G = nx.MultiDiGraph()
        self._ent_index = VectorIndex(self.dim, self.config.index)
        self._ep_index = VectorIndex(self.dim, self.config.index)
        self._ent_lex = LexicalIndex(self._lex_doc, self.config.index.lexical_stopwords)
        self._ep_lex = LexicalIndex(self._lex_doc, self.config.index.lexical_stopwords)

    def _lex_doc(self, i: int) -> str:
        """A node's lexical document: its text; an episode's with its speaker, as it is embedded."""
        sp = self.nodes.meta[i].get("speaker")
        return self.nodes.text[i] if sp is None else f"{sp}: {self.nodes.text[i]}"

    def _state(self, share: bool = False) -> dict:
        """The whole state. ``share=True`` (snapshots, checkpoints): the embedding rows and the list
        cells are shared, not copied -- both are immutable once written (see the module docstring)."""
        n, r = self.nodes.n, len(self._rel_text)
        return {
            "nodes": self.nodes.state(deep=not share),
            "edges": self.edges.state(deep=not share),
            "emb": self._emb[:n] if share else self._emb[:n].copy(),
            "rel_text": list(self._rel_text),
            "rel_emb": self._rel_emb[:r] if share else self._rel_emb[:r].copy(),
            "coact": [list(p) for p in self._coact],
            "tick": int(self.tick),
            "oplog_len": len(self.oplog),
        }

    def _load_state(self, st: dict, oplog: list[dict] | None = None, *, shared: bool = False) -> None:
        self.nodes.load_state(st["nodes"], deep=not shared)
        self.edges.load_state(st["edges"], deep=not shared)
        n = self.nodes.n
        emb = np.asarray(st["emb"], dtype=np.float32)
        if emb.shape != (n, self.dim):
            raise ValueError(f"embedding matrix has shape {emb.shape}, expected ({n}, {self.dim})")
        self._emb = np.zeros((max(n, 64), self.dim), dtype=np.float32)
        self._emb[:n] = emb
        self._rel_text = list(st["rel_text"])
        self._rel_id = {t: i for i, t in enumerate(self._rel_text)}
        r = np.asarray(st["rel_emb"], dtype=np.float32)
        if r.shape != (len(self._rel_text), self.dim):
            raise ValueError(f"relation embeddings have shape {r.shape}, expected ({len(self._rel_text)}, {self.dim})")
        self._rel_emb = np.zeros((max(len(self._rel_text), 16), self.dim), dtype=np.float32)
        self._rel_emb[: len(self._rel_text)] = r
        self._coact = [tuple(int(x) for x in p) for p in st["coact"]]
        self.tick = int(st["tick"])
        if oplog is not None:
            self.oplog = list(oplog)  # entries are never modified once logged: they can be shared
        self._rebuild_derived()

    def _rebuild_derived(self) -> None:
        """Rebuild networkx structure, entity keys and vector indexes from the stores."""
        nd, ed = self.nodes, self.edges
        self._rel_kind = {}  # decided from the relation embeddings, which a reload may change
        self.G = nx.MultiDiGraph()
        alive = np.flatnonzero(nd.alive)
        self.G.add_nodes_from(alive.tolist())
        live = np.flatnonzero(ed.alive & ed.valid)
        self.G.add_edges_from(zip(ed.src[live].tolist(), ed.dst[live].tolist(), live.tolist()))
        self._cites = {}
        for e in np.flatnonzero(ed.alive & (ed.kind == EDGE_FACT)).tolist():
            for x in ed.episodes[e]:
                self._cites.setdefault(int(x[2:]), []).append(e)
        self._entity_key = {}
        kinds = nd.kind
        for i in alive.tolist():
            if kinds[i] == KIND_ENTITY:
                for key in nd.meta[i]["keys"]:
                    self._entity_key.setdefault(key, i)
        self._ent_index = VectorIndex(self.dim, self.config.index)
        self._ep_index = VectorIndex(self.dim, self.config.index)
        self._ent_index.add(alive[kinds[alive] == KIND_ENTITY], self._emb)
        self._ep_index.add(alive[kinds[alive] == KIND_EPISODE], self._emb)
        self._ent_lex = LexicalIndex(self._lex_doc, self.config.index.lexical_stopwords)
        self._ep_lex = LexicalIndex(self._lex_doc, self.config.index.lexical_stopwords)
        if self.config.index.lexical:
            self._ent_lex.add(alive[kinds[alive] == KIND_ENTITY].tolist())
            self._ep_lex.add(alive[kinds[alive] == KIND_EPISODE].tolist())

    # ------------------------------------------------------------------------------------------
    # ids (stable) and rows (internal: renumbered by compact())
    def node_id(self, idx: int) -> str:
        """Public id of node row ``idx`` (``n<uid>`` for entities, ``ep<uid>`` for episodes)."""
        a = self.nodes._a
        return ("ep" if a["kind"][idx] == KIND_EPISODE else "n") + str(int(a["uid"][idx]))

    def _idx(self, node_id: str | int) -> int:
        """Row of a live node, from its id (``"n12"``, ``"ep3"``) or a row number (an int)."""
        if isinstance(node_id, (int, np.integer)):
            i = int(node_id)
        else:
            m = re.fullmatch(r"(ep|n)(\d+)", str(node_id))
            if not m:
                raise KeyError(f"not a node id: {node_id!r} (ids look like 'n12' or 'ep3')")
            i = self.nodes.row(int(m.group(2)))
            if 0 <= i < self.nodes.n and (self.nodes.kind[i] == KIND_EPISODE) != (m.group(1) == "ep"):
                raise KeyError(f"no live node {node_id!r} in the graph: uid {m.group(2)} is "
                               f"{'an episode' if self.nodes.kind[i] == KIND_EPISODE else 'an entity'}, "
                               f"{self.node_id(i)!r}")
        if not (0 <= i < self.nodes.n) or not self.nodes.alive[i]:
            raise KeyError(f"no live node {node_id!r} in the graph")
        return i

    def _ep_row(self, episode_id: str) -> int:
        """Row of the episode named ``ep<uid>`` in a provenance list (-1: compacted away)."""
        return self.nodes.row(int(episode_id[2:]))

    def _erows(self, eids: Iterable[int], what: str = "edge") -> np.ndarray:
        """Rows of edge ids ``eids`` (-1 for an id whose row was compacted away); ``KeyError`` for an id
        this graph never gave out."""
        e = np.asarray(list(eids) if not isinstance(eids, np.ndarray) else eids, dtype=np.int64)
        bad = e[(e < 0) | (e >= self.edges.next_uid)]
        if bad.size:
            raise KeyError(f"{what}: no edges {bad.tolist()} (the graph has given out {self.edges.next_uid} edge ids)")
        return self.edges.rows(e)

    def _eids(self, rows) -> list[int]:
        """Edge ids of edge rows ``rows``."""
        return self.edges._a["uid"][np.asarray(rows, dtype=np.int64)].tolist()

    # ------------------------------------------------------------------------------------------
    # primitives
    def _set_emb(self, idx: int, vec: np.ndarray) -> None:
        if idx >= self._emb.shape[0]:
            new = np.zeros((max(idx + 1, 2 * self._emb.shape[0]), self.dim), dtype=np.float32)
            new[: self._emb.shape[0]] = self._emb
            self._emb = new
        self._emb[idx] = vec

    def _relation(self, text: str, vec: np.ndarray | None = None) -> int:
        key = norm_key(text)
        rid = self._rel_id.get(key)
        if rid is not None:
            return rid
        if vec is None:
            vec = self._encode([text])[0]
        rid = len(self._rel_text)
        self._rel_text.append(key)
        self._rel_id[key] = rid
        if rid >= self._rel_emb.shape[0]:
            new = np.zeros((2 * self._rel_emb.shape[0], self.dim), dtype=np.float32)
            new[:rid] = self._rel_emb[:rid]
            self._rel_emb = new
        self._rel_emb[rid] = vec
        return rid

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        v = np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)
        if v.shape != (len(texts), self.dim):
            raise ValueError(f"embedder {getattr(self.embedder, 'name', '?')} returned shape {v.shape}, "
                             f"expected ({len(texts)}, {self.dim})")
        return v

    def _add_node(self, text: str, vec: np.ndarray, kind: int, *, importance: float, surprise: float,
                  source: str | None = None, time: str | None = None, index: bool = True) -> int:
        stage = STAGE_WORKING
        i = self.nodes.append(
            {"text": text, "meta": {"keys": [], "aliases": [text], "source": source, "time": time}},
            alive=True, kind=kind, stage=stage, importance=importance, surprise=surprise, confidence=1.0,
            created=self.tick, last_access=self.tick, access=0, permanent=False, cluster=-1)
        self._set_emb(i, vec)
        self.G.add_node(i)
        if kind == KIND_ENTITY:
            key = norm_key(text)
            self.nodes.meta[i]["keys"].append(key)
            self._entity_key.setdefault(key, i)
            if index:
                self._ent_index.add(np.array([i]), self._emb)
        elif index:
            self._ep_index.add(np.array([i]), self._emb)
        if self.config.index.lexical:  # tokenised at the next search (the speaker is set by then)
            (self._ent_lex if kind == KIND_ENTITY else self._ep_lex).add((i,))
        return i

    def _add_edge(self, s: int, o: int, rel: int, kind: int, strength: float, confidence: float,
                  episodes: list[str], sources: list[str], valid: bool = True, time: str | None = None) -> int:
        """A new edge; ``time``: when the observation that stated it was said (its validity interval
        starts there; an edge stored invalid closes there too)."""
        e = self.edges.append(
            {"episodes": list(episodes), "sources": list(sources), "valid_from_time": time,
             "valid_to_time": None if valid else time},
            src=s, dst=o, rel=rel, kind=kind, strength=strength, confidence=confidence, created=self.tick,
            last_used=self.tick, uses=0, alive=True, valid=valid, valid_from=self.tick,
            valid_to=-1 if valid else self.tick, invalidated_by=-1, permanent=False, activation=0.0)
        if valid:
            self.G.add_edge(s, o, key=e)
        if kind == EDGE_FACT:
            for x in episodes:
                self._cites.setdefault(int(x[2:]), []).append(e)
        return e

    def _invalidate_edge(self, e: int, by: int, time: str | None = None) -> None:
        """Supersede edge ``e`` by edge ``by``; ``time``: when the superseding observation was said."""
        ed = self.edges
        if not ed.valid[e]:
            return
        ed.valid[e] = False
        ed.valid_to[e] = self.tick
        ed.valid_to_time[e] = time
        ed.invalidated_by[e] = ed.uid[by]
        ed.permanent[e] = False
        if ed.alive[e]:
            self.G.remove_edge(int(ed.src[e]), int(ed.dst[e]), key=int(e))

    def _kill_edges(self, eids: Iterable[int]) -> int:
        ed = self.edges
        eids = np.asarray(list(eids) if not isinstance(eids, np.ndarray) else eids, dtype=np.int64)
        eids = eids[ed.alive[eids]] if eids.size else eids
        if eids.size == 0:
            return 0
        if self._removal_sinks:
            gone = [{**self._edge_dict(e), "alive": False, "removed_tick": int(self.tick)}
                    for e in eids.tolist() if ed.kind[e] == EDGE_FACT]
            for sink in self._removal_sinks:
                sink.extend(gone)
        in_nx = eids[ed.valid[eids]]
        srcs, dsts = ed.src[in_nx].tolist(), ed.dst[in_nx].tolist()
        G = self.G
        for u, v, k in zip(srcs, dsts, in_nx.tolist()):
            G.remove_edge(u, v, key=k)
        ed.alive[eids] = False
        return int(eids.size)

    def _incident_edges(self, idxs: np.ndarray, *, alive_only: bool = True) -> np.ndarray:
        ed = self.edges
        mask = np.zeros(self.nodes.n, dtype=bool)
        mask[idxs] = True
        hit = mask[ed.src] | mask[ed.dst]
        if alive_only:
            hit &= ed.alive
        return np.flatnonzero(hit)

    def _kill_nodes(self, idxs: Iterable[int]) -> int:
        nd = self.nodes
        idxs = np.unique(np.asarray(list(idxs) if not isinstance(idxs, np.ndarray) else idxs, dtype=np.int64))
        if idxs.size == 0:
            return 0
        idxs = idxs[nd.alive[idxs]]
        if idxs.size == 0:
            return 0
        self._kill_edges(self._incident_edges(idxs))
        nd.alive[idxs] = False
        self.G.remove_nodes_from(idxs.tolist())
        for i in idxs.tolist():
            for key in nd.meta[i]["keys"]:
                if self._entity_key.get(key) == i:
                    del self._entity_key[key]
        self._ent_index.remove(idxs)
        self._ep_index.remove(idxs)
        self._ent_lex.remove(idxs.tolist())
        self._ep_lex.remove(idxs.tolist())
        if self._coact:
            dead = set(idxs.tolist())
            self._coact = [p for p in self._coact if p[0] not in dead and p[1] not in dead]
        return int(idxs.size)

    def _merge_nodes(self, keep: int, drop: int) -> None:
        """Merge entity ``drop`` into ``keep``: edges move over, duplicates and self-loops go."""
        nd, ed = self.nodes, self.edges
        if keep == drop:
            return
        inc = self._incident_edges(np.array([drop]))
        for e in inc.tolist():
            u, v = int(ed.src[e]), int(ed.dst[e])
            nu, nv = (keep if u == drop else u), (keep if v == drop else v)
            if ed.valid[e]:
                self.G.remove_edge(u, v, key=e)
            if nu == nv:  # the edge linked the two merged nodes
                ed.alive[e] = False
                continue
            ed.src[e], ed.dst[e] = nu, nv
            if ed.valid[e]:
                dup = self._find_edge(nu, nv, int(ed.rel[e]), int(ed.kind[e]))
                if dup is not None:  # same fact on both: fold into the existing edge
                    ed.strength[dup] = max(ed.strength[dup], ed.strength[e])
                    ed.confidence[dup] = max(ed.confidence[dup], ed.confidence[e])
                    ed.uses[dup] += ed.uses[e]
                    ed.permanent[dup] |= ed.permanent[e]
                    self._add_provenance(dup, ed.episodes[e], ed.sources[e], int(ed.provenance_dropped[e]))
                    ed.valid_from_time[dup] = earliest_time(ed.valid_from_time[dup], ed.valid_from_time[e])
                    ed.alive[e] = False
                    continue
                self.G.add_edge(nu, nv, key=e)
        nd.importance[keep] = max(nd.importance[keep], nd.importance[drop])
        nd.surprise[keep] = max(nd.surprise[keep], nd.surprise[drop])
        nd.access[keep] += nd.access[drop]
        nd.last_access[keep] = max(nd.last_access[keep], nd.last_access[drop])
        nd.permanent[keep] |= nd.permanent[drop]
        nd.stage[keep] = max(nd.stage[keep], nd.stage[drop])
        mk, md = nd.meta[keep], nd.meta[drop]
        keys = list(md["keys"])
        # list cells are replaced, never mutated in place (snapshots share them)
        nd.meta[keep] = {**mk, "aliases": _merged(mk["aliases"], md["aliases"]), "keys": _merged(mk["keys"], keys),
                         "merged": [*mk.get("merged", []), self.node_id(drop)]}
        nd.meta[drop] = {**md, "keys": []}
        for key in keys:
            self._entity_key[key] = keep
        nd.permanent[drop] = False
        self._kill_nodes([drop])

    def _find_edge(self, s: int, o: int, rel: int, kind: int) -> int | None:
        """The live valid edge s -> o with this relation and kind (the lowest id if several), or None."""
        kd = self.G._succ.get(s, {}).get(o)
        if not kd:
            return None
        ed = self.edges
        found = [int(e) for e in kd if ed.rel[e] == rel and ed.kind[e] == kind]
        return min(found) if found else None

    def _add_provenance(self, e: int, episodes: Sequence[str], sources: Sequence[str], dropped: int = 0) -> None:
        """Add episode and source ids to edge ``e``'s provenance (a new list: cells are never mutated).

        With ``EngramConfig.max_provenance`` = ``n`` each list keeps its first id and its newest
        ``n - 1``; the ids dropped (the larger count of the two lists, plus ``dropped`` carried over
        from a merged edge) are added to the edge's ``provenance_dropped``.
        """
        ed = self.edges
        cap = self.config.engram.max_provenance
        new = [x for x in episodes if x not in ed.episodes[e]]
        gone = 0
        if new:
            eps = _merged(ed.episodes[e], new)
            if cap is not None and len(eps) > cap:
                gone = len(eps) - cap
                eps = [eps[0], *eps[-(cap - 1):]]
            ed.episodes[e] = eps
            if ed.kind[e] == EDGE_FACT:
                for x in new:
                    self._cites.setdefault(int(x[2:]), []).append(e)
        if any(x not in ed.sources[e] for x in sources):
            src = _merged(ed.sources[e], sources)
            if cap is not None and len(src) > cap:
                gone = max(gone, len(src) - cap)
                src = [src[0], *src[-(cap - 1):]]
            ed.sources[e] = src
        if gone or dropped:
            ed.provenance_dropped[e] += gone + dropped

    def _valid_facts_citing(self, i: int) -> Iterator[int]:
        """Rows of the live, valid facts whose provenance names episode row ``i`` (stale ``_cites``
        entries skipped: the edge went, or its provenance no longer names ``i``)."""
        ed = self.edges
        name = self.node_id(i)
        for e in self._cites.get(int(self.nodes.uid[i]), ()):
            if e < ed.n and ed.alive[e] and ed.valid[e] and name in ed.episodes[e]:
                yield e

    def _cited_by_valid_fact(self, i: int) -> bool:
        """Whether a live, valid fact names episode row ``i`` in its provenance."""
        return next(self._valid_facts_citing(i), None) is not None

    def _evidence_to_keep(self, cand: np.ndarray) -> np.ndarray:
        """The episodes among rows ``cand`` (about to be pruned together) that must stay so that every
        live, valid fact keeps a live episode in its provenance: for a fact whose other episodes are
        dead or candidates too, its oldest candidate episode stays."""
        nd, ed = self.nodes, self.edges
        alive = nd.alive
        cset = set(np.asarray(cand, dtype=np.int64).tolist())
        keep: set[int] = set()
        for i in sorted(cset):
            name = self.node_id(i)
            for e in self._valid_facts_citing(i):
                prov = ed.episodes[e]
                if any(j >= 0 and alive[j] and (j not in cset or j in keep)
                       for j in (self._ep_row(x) for x in prov if x != name)):
                    continue  # another episode stays to tell it
                keep.add(i)
                break
        return np.asarray(sorted(keep), dtype=np.int64)

    # ------------------------------------------------------------------------------------------
    # the operation log
    def _log(self, op: dict) -> None:
        """Append ``op`` (plain JSON values only) to the log; past ``max_oplog_ops`` entries the log is
        folded: the current state becomes :attr:`oplog_base` and the log starts again, empty."""
        self.oplog.append(op)
        cap = self.config.limits.max_oplog_ops
        if cap is not None and len(self.oplog) > cap:
            self.oplog_base = self._state(share=True)
            self.oplog = []

    # ------------------------------------------------------------------------------------------
    # public operations (logged)
    def add_episode(self, text: str, source: str | None = None, time: str | None = None,
                    importance: float | None = None, speaker: str | None = None) -> str:
        """Add an episodic node (one observed input) and return its id.

        Parameters
        ----------
        text : str
            The observed input, verbatim.
        source : str, optional
            Source id (e.g. ``"D1:3"``) carried by every fact engrammed with this episode.
        time : str, optional
            Time stamp of the input, kept as metadata.
        importance : float, optional
            Initial importance in [0, 1] (default ``EngramConfig.init_importance``).
        speaker : str, optional
            Who said it, kept as metadata, shown to the reader with the episode and embedded with
            its text (``"Gina: My dog ..."``), so a query naming the speaker finds the turn.
        """
        text = clean_text(text, "add_episode text")
        speaker = _clean_speaker(speaker)
        source, time = clean_source(source), clean_time(time)
        importance = None if importance is None else clean_unit(importance, "importance")
        imp = self.config.engram.init_importance if importance is None else importance
        vec = self._encode([text if speaker is None else f"{speaker}: {text}"])[0]  # "Gina's dog" finds her turn
        i = self._add_node(text, vec, KIND_EPISODE, importance=imp, surprise=0.0, source=source, time=time)
        op = {"op": "add_episode", "text": text, "source": source, "time": time, "importance": importance}
        if speaker is not None:  # logs written before speakers existed replay unchanged
            self.nodes.meta[i]["speaker"] = speaker
            op["speaker"] = speaker
        self._log(op)
        return self.node_id(i)

    def episodes(self) -> list[dict]:
        """Every live episode in observation order: ``id``, ``text``, ``source``, ``time``, ``speaker``.

        Observation order is the episode's ``time`` when every episode has one (ISO strings sort
        chronologically, times with a UTC offset by the moment they name: :func:`~.values.instant_key`; ties by
        id), the order they were added otherwise.
        """
        nd = self.nodes
        rows = np.flatnonzero(nd.alive & (nd.kind == KIND_EPISODE)).tolist()
        out = [{"id": self.node_id(i), "text": nd.text[i], "source": nd.meta[i].get("source"),
                "time": nd.meta[i].get("time"), "speaker": nd.meta[i].get("speaker")} for i in rows]
        if out and all(d["time"] for d in out):
            out.sort(key=lambda d: instant_key(d["time"]))  # stable: equal times keep id order
        return out

    def episode_current(self, node_id: str) -> bool | None:
        """Whether what episode ``node_id`` said still holds: None when no fact came from it, False
        when every fact it stated was superseded (the reader sees it as "no longer true"), else True."""
        i = self._idx(node_id)
        ep = self.node_id(i)
        ed = self.edges
        mine = [e for e in np.flatnonzero(ed.alive & (ed.kind == EDGE_FACT)).tolist() if ep in ed.episodes[e]]
        if not mine:
            return None
        return bool(ed.valid[mine].any())

    def episode_until(self, node_id: str) -> str | None:
        """When what episode ``node_id`` said stopped being true: the latest time its facts were
        superseded (None while one of them holds, or when no superseding observation had a time)."""
        i = self._idx(node_id)
        ep = self.node_id(i)
        ed = self.edges
        mine = [e for e in np.flatnonzero(ed.alive & (ed.kind == EDGE_FACT)).tolist() if ep in ed.episodes[e]]
        if not mine or ed.valid[mine].any():
            return None
        ends = [t for t in (ed.valid_to_time[e] for e in mine) if t]
        iso = [t for t in ends if is_iso_time(t)]
        return max(iso, key=instant_key) if iso else (ends[-1] if ends else None)

    def search_episodes(self, query: str | Sequence[str], k: int = 10) -> list[RecallItem]:
        """The ``k`` episodes most similar to the query by cosine, best first (exact search).

        A pure read: nothing is touched, reinforced or logged (static retrieval, the ``rag`` memory
        mode of :class:`mags_lib.MAGS`). Several queries: each episode keeps its best similarity.
        """
        queries = [query] if isinstance(query, str) else list(query)
        if not queries:
            raise ValueError("search_episodes needs a query string or a non-empty list of query strings")
        queries = [clean_text(q, "search query") for q in queries]
        k = clean_int(k, "k", minimum=1)
        best: dict[int, float] = {}
        for rows, sims in self._ep_index.search(self._encode(queries), k, self._emb, exact=True):
            for r, v in zip(rows.tolist(), sims.tolist()):
                if v > best.get(r, -np.inf):
                    best[r] = v
        ranked = sorted(best.items(), key=lambda rv: (-rv[1], rv[0]))[:k]
        nd = self.nodes
        out = []
        for r, v in ranked:
            src = nd.meta[r].get("source")
            out.append(RecallItem(text=nd.text[r], triplet=None, score=float(v), sources=() if src is None else (src,),
                                  path=(self.node_id(r),), kind="episode", edges=(), node_id=self.node_id(r)))
        return out

    def engram(self, triplets, episode: str | None = None, source: str | None = None, time: str | None = None,
               importance: float | None = None) -> EngramReport:
        """Write facts into memory (see :func:`mags_lib.graph.engram.engram`).

        Every fact needs provenance: ``episode`` (an id from :meth:`add_episode`, whose source id
        travels too) or ``source`` (a source id such as ``"D1:3"``), or both. Every argument is
        checked before anything changes.
        """
        from .engram import engram

        trips = _as_triplets(triplets)
        if episode is not None:
            i = self._idx(episode)
            if self.nodes.kind[i] != KIND_EPISODE:
                raise ValueError(f"{episode!r} is not an episode node; pass the id returned by add_episode()")
            episode = self.node_id(i)
        source, time = clean_source(source), clean_time(time)
        if episode is None and source is None:
            raise ValueError("engram needs provenance: pass episode=<id from add_episode()> or "
                             "source=<source id, e.g. 'D1:3'> so that every fact can be traced back")
        importance = None if importance is None else clean_unit(importance, "importance")
        rep = engram(self, trips, episode=episode, source=source, time=time, importance=importance)
        self._log({"op": "engram", "triplets": [list(t) for t in trips],
                   "episode": episode, "source": source, "time": time, "importance": importance})
        return rep

    def recall(self, query: str | Sequence[str], k: int = 10, query_embeddings: np.ndarray | None = None,
               config=None, history: bool | None = None) -> Recall:
        """Recall facts and episodes (see :func:`mags_lib.graph.recall.recall`).

        ``history``: True returns superseded facts too (marked ``current=False``, with their validity
        interval), False never, None as ``config.history`` says (default: when a query asks about the
        past, see :func:`mags_lib.graph.recall.asks_about_past`).
        """
        from .recall import recall

        if isinstance(query, str):
            query = clean_text(query, "recall query")
        elif isinstance(query, Sequence) and not isinstance(query, (bytes, bytearray)):
            if not query:
                raise ValueError("recall needs a query string or a non-empty list of query strings, got []")
            query = [clean_text(q, "recall query") for q in query]
        else:
            raise TypeError("recall needs a query string or a non-empty list of query strings, "
                            f"got {query!r:.80}")
        k = clean_int(k, "k", minimum=1)
        if config is not None and not isinstance(config, RecallConfig):
            raise TypeError(f"config must be a RecallConfig or None, got {type(config).__name__}")
        if query_embeddings is not None:
            query_embeddings = np.asarray(query_embeddings, dtype=np.float32)
            if not np.isfinite(query_embeddings).all():
                raise ValueError("query_embeddings hold NaN or infinite values")
        if history is not None and not isinstance(history, (bool, np.bool_)):
            raise TypeError(f"history must be True, False or None, got {history!r}")
        history = None if history is None else bool(history)
        res = recall(self, query, k=k, query_embeddings=query_embeddings, config=config, history=history)
        cfg = config or self.config.recall
        if res.items and (cfg.touch or cfg.coactivation):  # a recall that changed nothing is not logged
            op = {"op": "recall", "query": query, "k": k}
            if query_embeddings is not None:
                q = np.ascontiguousarray(query_embeddings.reshape(-1, self.dim), dtype="<f4")
                op["query_embeddings_b64"] = base64.b64encode(q.tobytes()).decode("ascii")
            if config is not None:
                op["config"] = _cfg_delta(config)
            if history is not None:  # logs written before history replay unchanged
                op["history"] = history
            self._log(op)
        return res

    def reinforce(self, result: Recall, reward: float = 1.0, items: Sequence[int] | None = None) -> int:
        """Strengthen (reward > 0) or weaken (reward < 0) the paths of recalled items.

        A positive reward also counts a use of each edge and refreshes its recency (both protect it
        from decay); a negative one does neither, and a reward of 0 changes nothing (it is still
        logged). Returns the number of distinct edges changed (see
        :func:`mags_lib.graph.dynamics.reinforce_edges`).
        """
        from .dynamics import reinforce_edges

        if not isinstance(result, Recall):
            raise TypeError(f"reinforce needs the Recall returned by recall(), got {type(result).__name__}")
        if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, numbers.Real) \
                or not -1.0 <= float(reward) <= 1.0:
            raise ValueError(f"reward must be a number in [-1, 1], got {reward!r}")
        reward = float(reward)
        if items is None:
            chosen = result.items
        else:
            idx = [clean_int(i, "items[...]", minimum=0) for i in items]
            if any(i >= len(result.items) for i in idx):
                raise ValueError(f"items must index the {len(result.items)} recalled items, got {list(items)}")
            chosen = [result.items[i] for i in idx]
        eids = sorted({int(e) for it in chosen for e in it.edges}
                      | {int(it.edge_id) for it in chosen if it.edge_id is not None})
        n = reinforce_edges(self, eids, reward)  # ids; those compacted away since the recall are skipped
        self._log({"op": "reinforce", "edges": eids, "reward": reward})
        return n

    def maintain(self, steps: Sequence[str] | None = None) -> MaintainReport:
        """One tick of every enabled dynamic (see :func:`mags_lib.graph.dynamics.maintain`)."""
        from .dynamics import STEPS, maintain

        if steps is not None:
            if isinstance(steps, str) or not all(isinstance(x, str) for x in steps):
                raise TypeError(f"steps must be a list of step names such as ['decay'], got {steps!r}")
            steps = [str(x) for x in steps]
            bad = [x for x in steps if x not in STEPS]
            if bad:
                raise ValueError(f"unknown maintain steps {bad}; known: {list(STEPS)}")
        rep = maintain(self, steps=steps)
        rep.compacted = self._compact_if_worth_it()
        self._log({"op": "maintain", "steps": steps})
        return rep

    # ------------------------------------------------------------------------------------------
    # compaction
    def compact(self) -> dict:
        """Drop the rows that pruning and merging left dead and renumber the others (logged).

        Nodes and edges removed from the memory stay as dead rows (``alive=False``) in the column
        stores, the embedding matrix and every snapshot taken since; compaction frees them. Ids do
        not change (they are the rows' ``uid``): recall, :meth:`facts`, provenance and the operation
        log read the same before and after, and so does everything the graph does next (the derived
        structures are rebuilt as on a load). What goes: dead edges (:meth:`edge` no longer knows
        their ids) and dead nodes -- except dead episodes still named in a live edge's provenance,
        whose time the conflict rules read (:func:`~mags_lib.graph.engram.fact_time`). Snapshots keep
        their own rows. :meth:`maintain` runs it by itself when dead rows pass
        ``LimitsConfig.compact_dead_share`` of the rows.

        Returns
        -------
        dict
            ``node_rows`` and ``edge_rows``: (before, after); ``kept_dead_episodes``: dead episode
            rows kept for the provenance of live facts.
        """
        out = self._compact()
        self._log({"op": "compact"})
        return out

    def _dead_rows(self) -> int:
        """Rows of removed nodes and edges still held by the stores."""
        nd, ed = self.nodes, self.edges
        return int(nd.n - np.count_nonzero(nd.alive) + ed.n - np.count_nonzero(ed.alive))

    def _node_rows_to_keep(self) -> np.ndarray:
        """Node rows a compaction keeps: live nodes, the ends of live edges (always live ones: pruning
        takes a node's edges with it) and dead episodes named in a live edge's provenance."""
        nd, ed = self.nodes, self.edges
        keep = nd.alive.copy()
        live = np.flatnonzero(ed.alive)
        keep[ed.src[live]] = True
        keep[ed.dst[live]] = True
        named = {x for e in live.tolist() for x in ed.episodes[e]}
        if named:
            rows = nd.rows(np.fromiter((int(x[2:]) for x in named), dtype=np.int64, count=len(named)))
            keep[rows[rows >= 0]] = True
        return np.flatnonzero(keep)

    def _compact_if_worth_it(self) -> dict | None:
        """Compact (unlogged: part of a maintain tick) when the removable dead rows pass
        ``LimitsConfig.compact_dead_share`` of at least ``compact_min_rows`` rows."""
        lim = self.config.limits
        rows = self.nodes.n + self.edges.n
        if lim.compact_dead_share is None or rows < lim.compact_min_rows \
                or self._dead_rows() <= lim.compact_dead_share * rows:
            return None
        keep = self._node_rows_to_keep()  # dead episodes that must stay do not count
        removable = self.nodes.n - keep.size + self.edges.n - np.count_nonzero(self.edges.alive)
        if removable <= lim.compact_dead_share * rows:
            return None
        return self._compact(keep)

    def _compact(self, node_keep: np.ndarray | None = None) -> dict:
        """Compaction without the log entry (see :meth:`compact`)."""
        nd, ed = self.nodes, self.edges
        nkeep = self._node_rows_to_keep() if node_keep is None else node_keep
        ekeep = np.flatnonzero(ed.alive)
        before = (nd.n, ed.n)
        nmap = np.full(nd.n, -1, dtype=np.int64)
        nmap[nkeep] = np.arange(nkeep.size)
        src, dst = nmap[ed.src[ekeep]], nmap[ed.dst[ekeep]]
        if (src < 0).any() or (dst < 0).any():  # cannot happen: the ends of live edges are kept
            raise RuntimeError("compaction would leave a live edge without its node")
        emb = np.zeros((max(nkeep.size, 64), self.dim), dtype=np.float32)
        emb[: nkeep.size] = self._emb[nkeep]  # a new matrix: snapshots keep sharing the old one
        coact = [(int(nmap[a]), int(nmap[b])) for a, b in self._coact if nmap[a] >= 0 and nmap[b] >= 0]
        nd.compact(nkeep)
        ed.compact(ekeep)
        ed.src[:] = src
        ed.dst[:] = dst
        self._emb, self._coact = emb, coact
        self._rebuild_derived()
        return {"node_rows": [before[0], nd.n], "edge_rows": [before[1], ed.n],
                "kept_dead_episodes": int(nd.n - np.count_nonzero(nd.alive))}

    def demote(self, edges: Sequence[int], factor: float = 0.5) -> int:
        """Weaken live valid fact edges: ``strength *= factor`` and no longer permanent (logged).

        Parametric consolidation (:mod:`mags_lib.consolidation`) uses it for facts a LoRA now holds: the
        graph keeps them, weaker, so decay and pruning may later remove them. Returns how many changed.
        """
        from .dynamics import MIN_STRENGTH

        eids = self._live_edge_ids(edges, "demote")
        if isinstance(factor, (bool, np.bool_)) or not isinstance(factor, numbers.Real) or not 0 < float(factor) <= 1:
            raise ValueError(f"factor must be a number in (0, 1], got {factor!r}")
        ed = self.edges
        e = self._erows(eids)
        if e.size:
            ed.strength[e] = np.maximum(ed.strength[e] * float(factor), MIN_STRENGTH)
            ed.permanent[e] = False
        self._log({"op": "demote", "edges": [int(x) for x in eids], "factor": float(factor)})
        return int(e.size)

    def forget(self, edges: Sequence[int]) -> int:
        """Remove live fact edges from the memory (logged); nodes stay. Returns how many were removed.

        Unlike a superseded fact (invalidated, still listed by ``facts(include_invalid=True)``), a
        forgotten edge is gone from the live memory: parametric consolidation's ``prune`` mode, whose
        adapter records what it took over (with the sources). The episodes it was drawn from are marked
        ``meta["forgotten"]``: pruning may then remove them once idle (a fact that decayed leaves its turn).
        """
        eids = self._live_edge_ids(edges, "forget")
        rows = self._erows(eids)
        nd, ed = self.nodes, self.edges
        for r in rows.tolist():  # its turns go with it (DynamicsConfig.keep_unconsolidated keeps them otherwise)
            for x in ed.episodes[r]:
                j = self._ep_row(x)
                if j >= 0 and not nd.meta[j].get("forgotten"):
                    nd.meta[j] = {**nd.meta[j], "forgotten": True}  # replaced, never mutated (snapshots share it)
        n = self._kill_edges(rows)
        self._log({"op": "forget", "edges": [int(x) for x in eids]})
        return n

    def _live_edge_ids(self, edges: Sequence[int], what: str) -> list[int]:
        if isinstance(edges, (str, bytes)) or not isinstance(edges, (Sequence, np.ndarray)):
            raise TypeError(f"{what} needs a list of edge ids, got {type(edges).__name__}")
        ids = sorted({clean_int(e, "edges[...]", minimum=0) for e in edges})
        ed = self.edges
        rows = self._erows(ids, what)  # KeyError for an id never given out
        return [e for e, r in zip(ids, rows.tolist()) if r >= 0 and ed.alive[r] and ed.valid[r]]

    def set_permanent(self, node_id: str, permanent: bool = True) -> None:
        """Pin (or unpin) a node: permanent nodes are never pruned or evicted."""
        i = self._idx(node_id)
        if not isinstance(permanent, (bool, np.bool_)):
            raise TypeError(f"permanent must be True or False, got {permanent!r}")
        self.nodes.permanent[i] = bool(permanent)
        self._log({"op": "set_permanent", "node": self.node_id(i), "permanent": bool(permanent)})

    # ------------------------------------------------------------------------------------------
    # replay
    def apply(self, op: dict) -> None:
        """Apply one operation-log entry (as recorded by this class; checked by :func:`check_op`)."""
        check_op(op)
        kind = op["op"]
        if kind == "add_episode":
            self.add_episode(op["text"], source=op["source"], time=op["time"], importance=op.get("importance"),
                             speaker=op.get("speaker"))
        elif kind == "engram":
            self.engram([tuple(t) for t in op["triplets"]], episode=op["episode"], source=op["source"],
                        time=op["time"], importance=op.get("importance"))
        elif kind == "recall":
            cfg = op.get("config")
            self.recall(op["query"], k=op["k"], query_embeddings=_op_query_embeddings(op, self.dim),
                        config=None if cfg is None else RecallConfig(**cfg), history=op.get("history"))
        elif kind == "reinforce":
            from .dynamics import reinforce_edges

            reinforce_edges(self, op["edges"], op["reward"])  # edge ids
            self._log({"op": "reinforce", "edges": [int(e) for e in op["edges"]], "reward": float(op["reward"])})
        elif kind == "maintain":
            self.maintain(steps=op.get("steps"))
        elif kind == "set_permanent":
            self.set_permanent(op["node"], op["permanent"])
        elif kind == "demote":
            self.demote(op["edges"], op["factor"])
        elif kind == "forget":
            self.forget(op["edges"])
        elif kind == "compact":
            self.compact()

    @classmethod
    def replay(cls, oplog: Sequence[dict], embedder, config: GraphConfig | None = None,
               seed: int | None = None, base: dict | None = None) -> LiquidGraph:
        """Build a new graph by applying an operation log (needs the same embedder and config).

        ``base`` is the state the log starts from: a graph's :attr:`oplog_base` (None: the empty
        graph). ``LiquidGraph.replay(g.oplog, g.embedder, g.config, base=g.oplog_base)`` rebuilds ``g``.
        """
        g = cls(embedder, config=config, seed=seed)
        if base is not None:
            g._load_state(base, shared=True)
            g.oplog_base = base
        for i, op in enumerate(oplog):
            try:
                g.apply(op)
            except (KeyError, ValueError, TypeError, IndexError) as exc:
                kind = op.get("op") if isinstance(op, dict) else type(op).__name__
                raise ValueError(f"operation-log entry {i} ({kind}) cannot be replayed: {exc} (a log of another "
                                 "graph, or an edited one?)") from exc
        return g

    # ------------------------------------------------------------------------------------------
    # snapshots
    def snapshot(self) -> str:
        """Keep the whole state in memory; returns its id (``"s0"``, ``"s1"``, ...).

        A snapshot shares what never changes (embedding rows, list cells, log entries) and copies
        the numeric columns. ``config.limits`` bounds their number and total size: the oldest are
        dropped first (the newest is always kept).
        """
        sid = f"s{self._snap_counter}"
        self._snap_counter += 1
        st = self._state(share=True)
        st["oplog"] = tuple(self.oplog)
        st["oplog_base"] = self.oplog_base
        st["nbytes"] = _snapshot_nbytes(st)
        self._snapshots[sid] = st
        lim = self.config.limits
        while len(self._snapshots) > 1 and (
                (lim.max_snapshots is not None and len(self._snapshots) > lim.max_snapshots)
                or (lim.max_snapshot_bytes is not None and self.snapshot_nbytes() > lim.max_snapshot_bytes)):
            del self._snapshots[next(iter(self._snapshots))]
        return sid

    @property
    def snapshots(self) -> list[str]:
        """Ids of the stored snapshots, oldest first."""
        return list(self._snapshots)

    def snapshot_nbytes(self) -> int:
        """Bytes held by the stored snapshots (numeric columns, list slots, log references)."""
        return int(sum(st["nbytes"] for st in self._snapshots.values()))

    def _snapshot(self, sid: str) -> dict:
        if isinstance(sid, str) and sid in self._snapshots:
            return self._snapshots[sid]
        m = re.fullmatch(r"s(\d+)", sid) if isinstance(sid, str) else None
        if m and int(m.group(1)) < self._snap_counter:
            raise KeyError(f"snapshot {sid!r} was dropped (config.limits keeps the newest "
                           f"{self.config.limits.max_snapshots} within {self.config.limits.max_snapshot_bytes} "
                           f"bytes, or drop_snapshot() removed it); known: {self.snapshots}")
        raise KeyError(f"unknown snapshot {sid!r}; known: {self.snapshots}")

    def rollback(self, sid: str) -> None:
        """Restore the graph to snapshot ``sid`` exactly (the operation log is truncated to match)."""
        st = self._snapshot(sid)
        self._load_state(st, oplog=list(st["oplog"]), shared=True)
        self.oplog_base = st["oplog_base"]

    def drop_snapshot(self, sid: str) -> None:
        """Free a snapshot's memory (``KeyError`` for an unknown id)."""
        self._snapshot(sid)
        del self._snapshots[sid]

    @contextlib.contextmanager
    def transaction(self) -> Iterator[LiquidGraph]:
        """All or nothing: if the block raises, the graph is restored exactly (state, log, snapshots).

        >>> from mags_lib.embed import HashEmbedder
        >>> g = LiquidGraph(HashEmbedder(dim=16))
        >>> try:
        ...     with g.transaction():
        ...         ep = g.add_episode("half a turn", source="T1")
        ...         raise RuntimeError("the model failed")
        ... except RuntimeError:
        ...     pass
        >>> g.stats()["n_nodes"], g.oplog
        (0, [])

        Costs one copy of the numeric columns (no text, no embeddings) when entered.
        """
        st = self._state(share=True)
        log, n_log, base = self.oplog, len(self.oplog), self.oplog_base
        snaps, counter = dict(self._snapshots), self._snap_counter
        sinks = [(sink, len(sink)) for sink in self._removal_sinks]
        try:
            yield self
        except BaseException:
            self._load_state(st, shared=True)
            del log[n_log:]
            self.oplog, self.oplog_base = log, base
            self._snapshots, self._snap_counter = snaps, counter
            for sink, n in sinks:  # what the block removed is back
                del sink[n:]
            raise

    @contextlib.contextmanager
    def record_removed_facts(self) -> Iterator[list[dict]]:
        """Collect the fact edges removed from the memory while the block runs.

        Pruning (decay, capacity, a node's removal) and :meth:`forget` take edges out of the stores' live
        rows, and :meth:`compact` drops them: :meth:`facts` no longer lists them. Inside this block each
        removed fact edge is appended to the yielded list as :meth:`edge` described it just before it
        went (``alive`` False, ``removed_tick``: the clock then), so an evaluation can score what the
        memory held during a run, not only what is left at its end
        (:func:`mags_lib.game.quality.operation_quality`'s ``removed``). Edges folded into another
        by a merge of two nodes are not removals (the fact lives on in the edge kept). A
        :meth:`transaction` that fails takes its removals back out of the list; a :meth:`rollback`
        may bring a removed edge back (the live one then wins: compare ids). Not part of the state:
        the list is never saved, and blocks can nest (each gets every removal made inside it).

        >>> from mags_lib.embed import HashEmbedder
        >>> g = LiquidGraph(HashEmbedder(dim=16))
        >>> e = g.engram([("Ana", "lives in", "Denver")], source="T1").new_edges[0]
        >>> with g.record_removed_facts() as gone:
        ...     _ = g.forget([e])
        >>> [(f["id"], f["object"], f["alive"]) for f in gone], g.facts()
        ([(0, 'Denver', False)], [])
        """
        sink: list[dict] = []
        self._removal_sinks.append(sink)
        try:
            yield sink
        finally:
            self._removal_sinks = [x for x in self._removal_sinks if x is not sink]

    def diff(self, a: str, b: str | None = None, *, atol: float = 1e-12) -> GraphDiff:
        """What changed from snapshot ``a`` to snapshot ``b`` (None: the current graph)."""
        self._snapshot(a)
        if b is not None:
            self._snapshot(b)
        sa = self._snapshots[a]
        sb = self._state() if b is None else self._snapshots[b]
        return _diff_states(sa, sb, atol=atol)

    def equals(self, other: LiquidGraph) -> bool:
        """True when both graphs hold exactly the same state (arrays, text, provenance, clock)."""
        return not _state_differences(self._state(share=True), other._state(share=True))

    # ------------------------------------------------------------------------------------------
    # inspection
    def stats(self) -> dict:
        """Counts and summary statistics of the memory."""
        nd, ed = self.nodes, self.edges
        alive = nd.alive
        live = ed.alive & ed.valid
        s = ed.strength[live]
        return {
            "tick": int(self.tick),
            "n_nodes": int(alive.sum()),
            "n_entities": int((alive & (nd.kind == KIND_ENTITY)).sum()),
            "n_episodes": int((alive & (nd.kind == KIND_EPISODE)).sum()),
            "n_working": int((alive & (nd.stage == STAGE_WORKING) & (nd.kind == KIND_ENTITY)).sum()),
            "n_long_term": int((alive & (nd.stage == STAGE_LONG) & (nd.kind == KIND_ENTITY)).sum()),
            "n_permanent_nodes": int((alive & nd.permanent).sum()),
            "n_edges": int(ed.alive.sum()),
            "n_valid_edges": int(live.sum()),
            "n_facts": int((live & (ed.kind == EDGE_FACT)).sum()),
            "n_invalidated": int((ed.alive & ~ed.valid).sum()),
            "n_permanent_edges": int((live & ed.permanent).sum()),
            "n_relations": len(self._rel_text),
            "n_clusters": len(np.unique(nd.cluster[alive & (nd.cluster >= 0)])),
            "mean_strength": float(s.mean()) if s.size else 0.0,
            "approximate_index": bool(self._ent_index.approximate),
            "n_ops": len(self.oplog),
        }

    def node(self, node_id: str) -> dict:
        """All attributes of one live node."""
        i = self._idx(node_id)
        nd = self.nodes
        m = nd.meta[i]
        return {
            "id": self.node_id(i), "text": nd.text[i],
            "block": "episodic" if nd.kind[i] == KIND_EPISODE else "semantic",
            "stage": "long_term" if nd.stage[i] == STAGE_LONG else "working",
            "importance": float(nd.importance[i]), "surprise": float(nd.surprise[i]),
            "confidence": float(nd.confidence[i]), "created": int(nd.created[i]),
            "last_access": int(nd.last_access[i]), "access_count": int(nd.access[i]),
            "permanent": bool(nd.permanent[i]), "cluster": int(nd.cluster[i]),
            "aliases": list(m["aliases"]), "source": m.get("source"), "time": m.get("time"),
            "degree": int(self.G.degree(i)),
        }

    def edge(self, eid: int) -> dict:
        """All attributes of one edge (alive or not, valid or not; a removed edge until a compaction)."""
        e = clean_int(eid, "edge id") if not isinstance(eid, (int, np.integer)) else int(eid)
        r = self.edges.row(e) if 0 <= e < self.edges.next_uid else -1
        if r < 0:
            gone = 0 <= e < self.edges.next_uid
            raise KeyError(f"no edge {eid}" + (" (it was removed, and compacted away)" if gone else ""))
        return self._edge_dict(r)

    def _edge_dict(self, e: int) -> dict:
        """:meth:`edge` of edge row ``e``."""
        ed, nd = self.edges, self.nodes
        s, o = int(ed.src[e]), int(ed.dst[e])
        return {
            "id": int(ed.uid[e]), "subject": nd.text[s], "relation": self._rel_text[ed.rel[e]], "object": nd.text[o],
            "src": self.node_id(s), "dst": self.node_id(o), "kind": EDGE_KIND_NAMES[int(ed.kind[e])],
            "strength": float(ed.strength[e]), "confidence": float(ed.confidence[e]),
            "created": int(ed.created[e]), "last_used": int(ed.last_used[e]), "uses": int(ed.uses[e]),
            "alive": bool(ed.alive[e]), "valid": bool(ed.valid[e]),
            # the validity interval in real time (the observations' times), in ticks where none was given
            "valid_from": ed.valid_from_time[e] or int(ed.valid_from[e]),
            "valid_to": None if ed.valid_to[e] < 0 else (ed.valid_to_time[e] or int(ed.valid_to[e])),
            "valid_from_tick": int(ed.valid_from[e]), "valid_to_tick": None if ed.valid_to[e] < 0 else int(ed.valid_to[e]),
            "invalidated_by": None if ed.invalidated_by[e] < 0 else int(ed.invalidated_by[e]),
            "permanent": bool(ed.permanent[e]), "episodes": list(ed.episodes[e]), "sources": list(ed.sources[e]),
            "provenance_dropped": int(ed.provenance_dropped[e]),
        }

    def facts(self, include_invalid: bool = False) -> list[dict]:
        """Every live fact edge (and the superseded ones with ``include_invalid``)."""
        ed = self.edges
        mask = ed.alive & (ed.kind == EDGE_FACT)
        if not include_invalid:
            mask &= ed.valid
        return [self._edge_dict(e) for e in np.flatnonzero(mask).tolist()]

    def history(self, subject: str, relation: str) -> list[dict]:
        """All facts ever stored for (subject, relation), valid and superseded, oldest first."""
        i = self._entity_key.get(norm_key(subject))
        rid = self._rel_id.get(norm_key(relation))
        if i is None or rid is None:
            return []
        ed = self.edges
        mask = ed.alive & (ed.kind == EDGE_FACT) & (ed.src == i) & (ed.rel == rid)
        rows = np.flatnonzero(mask).tolist()
        # by when each was first said (a statement read out of order takes its place); undated ones keep theirs
        order = chronological_order([ed.valid_from_time[e] for e in rows])
        return [self._edge_dict(rows[j]) for j in order]

    def find(self, text: str) -> str | None:
        """Id of the entity node whose normalised text (or an alias) equals ``text``, or None."""
        i = self._entity_key.get(norm_key(text))
        return None if i is None else self.node_id(i)

    def to_networkx(self, include_invalid: bool = False) -> nx.MultiDiGraph:
        """A copy of the live memory as a networkx MultiDiGraph with string ids and all attributes."""
        out = nx.MultiDiGraph()
        for i in np.flatnonzero(self.nodes.alive).tolist():
            d = self.node(self.node_id(i))
            out.add_node(d.pop("id"), **d)
        ed = self.edges
        mask = ed.alive if include_invalid else (ed.alive & ed.valid)
        for e in np.flatnonzero(mask).tolist():
            d = self._edge_dict(e)
            out.add_edge(d["src"], d["dst"], key=d["id"], **d)
        return out

    def __repr__(self) -> str:
        s = self.stats()
        return (f"LiquidGraph(nodes={s['n_nodes']}, valid_edges={s['n_valid_edges']}, facts={s['n_facts']}, "
                f"episodes={s['n_episodes']}, tick={s['tick']})")

    # persistence (see .persistence)
    def save(self, path) -> object:
        """Save atomically to a versioned directory (see :func:`mags_lib.graph.persistence.save_graph`)."""
        from .persistence import save_graph

        return save_graph(self, path)

    @classmethod
    def load(cls, path, embedder, config: GraphConfig | None = None) -> LiquidGraph:
        """Load a graph saved by :meth:`save` (see :func:`mags_lib.graph.persistence.load_graph`)."""
        from .persistence import load_graph

        return load_graph(path, embedder, config=config)

    def with_config(self, config: GraphConfig) -> LiquidGraph:
        """A copy of this graph (state, log and its base) that runs with another config."""
        g = LiquidGraph(self.embedder, config=config, seed=self.seed)
        g._load_state(self._state(share=True), oplog=self.oplog, shared=True)
        g.oplog_base = self.oplog_base
        return g

    def replayed(self) -> LiquidGraph:
        """A new graph rebuilt from this graph's :attr:`oplog_base` and operation log."""
        return LiquidGraph.replay(self.oplog, self.embedder, config=self.config, seed=self.seed,
                                  base=self.oplog_base)

    def copy(self) -> LiquidGraph:
        """An independent copy (state, log, config; snapshots are not copied)."""
        return self.with_config(self.config)


# ----------------------------------------------------------------------------------------------
def _merged(a: Sequence, b: Iterable) -> list:
    """A new list: ``a`` followed by the items of ``b`` not in it yet."""
    out = list(a)
    for x in b:
        if x not in out:
            out.append(x)
    return out


def _clean_speaker(speaker) -> str | None:
    """A speaker name: a non-empty string on one line (whitespace collapsed), or None."""
    if speaker is None:
        return None
    if not isinstance(speaker, str):
        raise TypeError(f"speaker must be a name (str) or None, got {type(speaker).__name__}")
    name = " ".join(clean_text(speaker, "speaker", allow_empty=True).split())
    if not name:
        raise ValueError("speaker is empty: pass the speaker's name, or None when unknown")
    return name


def _field(x, where: str) -> str:
    if isinstance(x, str):
        return clean_text(x, where, allow_empty=True)
    if isinstance(x, numbers.Number) and not isinstance(x, (bool, np.bool_, complex)):
        return str(x.item() if isinstance(x, np.generic) else x)
    raise TypeError(f"{where} must be a string, got {type(x).__name__} {x!r:.40}")


def _as_triplets(triplets) -> list[tuple[str, str, str]]:
    if isinstance(triplets, tuple) and len(triplets) == 3 and all(isinstance(x, str) for x in triplets):
        triplets = [triplets]
    if isinstance(triplets, (str, bytes)) or not isinstance(triplets, Iterable):
        raise TypeError(f"triplets must be a list of (subject, relation, object) tuples, got {triplets!r:.80}")
    out = []
    for t in triplets:
        if not isinstance(t, (tuple, list)) or len(t) != 3:
            raise ValueError(f"a triplet must be (subject, relation, object), got {t!r:.80}")
        out.append(tuple(_field(x, f"triplet field {name}") for x, name in zip(t, ("subject", "relation", "object"))))
    return out


def _cfg_delta(cfg: RecallConfig) -> dict:
    """The fields of a RecallConfig that differ from the defaults (enough to rebuild it)."""
    default = asdict(RecallConfig())
    return {k: sorted(v) if isinstance(v, frozenset) else v for k, v in asdict(cfg).items() if v != default[k]}


def _op_query_embeddings(op: dict, dim: int) -> np.ndarray | None:
    if "query_embeddings_b64" in op:
        raw = base64.b64decode(op["query_embeddings_b64"].encode("ascii"), validate=True)
        return np.frombuffer(raw, dtype="<f4").reshape(-1, dim).astype(np.float32)
    qe = op.get("query_embeddings")  # logs written before the compact form
    return None if qe is None else np.asarray(qe, dtype=np.float32)


def _snapshot_nbytes(st: dict) -> int:
    """Memory a snapshot holds on its own (shared embedding rows not counted)."""
    n = 0
    for part in ("nodes", "edges"):
        n += sum(a.nbytes for a in st[part]["arrays"].values()) + 8 * sum(len(v) for v in st[part]["lists"].values())
    return n + 8 * len(st["oplog"]) + 16 * len(st["coact"]) + 8 * len(st["rel_text"])


_STR_OR_NONE = (str, type(None))
OPS: dict[str, dict[str, tuple]] = {
    "add_episode": {"text": (str,), "source": _STR_OR_NONE, "time": _STR_OR_NONE},
    "engram": {"triplets": (list,), "episode": _STR_OR_NONE, "source": _STR_OR_NONE, "time": _STR_OR_NONE},
    "recall": {"query": (str, list), "k": (int,)},
    "reinforce": {"edges": (list,), "reward": (int, float)},
    "maintain": {"steps": (list, type(None))},
    "set_permanent": {"node": (str, int), "permanent": (bool,)},
    "demote": {"edges": (list,), "factor": (int, float)},
    "forget": {"edges": (list,)},
    "compact": {},
}
"""Operation-log entry kinds and the type of each required field."""


def check_op(op: object) -> None:
    """Check one operation-log entry's shape; ``ValueError`` naming the field otherwise."""
    if not isinstance(op, dict) or not isinstance(op.get("op"), str) or op["op"] not in OPS:
        kind = op.get("op") if isinstance(op, dict) else type(op).__name__
        raise ValueError(f"unknown operation {kind!r} in the operation log; known: {sorted(OPS)}")
    kind = op["op"]
    for name, types in OPS[kind].items():
        v = op.get(name, ...)
        if v is ... or not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise ValueError(f"{kind} entry: field {name!r} must be {' or '.join(t.__name__ for t in types)}, "
                             f"got {v!r:.60}" if v is not ... else f"{kind} entry lacks the field {name!r}")
    imp = op.get("importance")
    if imp is not None and (isinstance(imp, bool) or not isinstance(imp, (int, float))):
        raise ValueError(f"{kind} entry: field 'importance' must be a number or null, got {imp!r:.60}")
    if kind == "add_episode" and op.get("speaker") is not None and not isinstance(op["speaker"], str):
        raise ValueError(f"add_episode entry: field 'speaker' must be a string or null, got {op['speaker']!r:.60}")
    if kind == "engram":
        if not all(isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t) for t in op["triplets"]):
            raise ValueError("engram entry: field 'triplets' must be a list of [subject, relation, object] strings")
        if op["episode"] is not None and not re.fullmatch(r"ep\d+", op["episode"]):
            raise ValueError(f"engram entry: field 'episode' must be an episode id like 'ep3', got {op['episode']!r:.40}")
    if kind == "set_permanent" and isinstance(op["node"], str) and not re.fullmatch(r"(ep|n)\d+", op["node"]):
        raise ValueError(f"set_permanent entry: field 'node' must be a node id like 'n12', got {op['node']!r:.40}")
    if kind == "recall":
        q = op["query"]
        if isinstance(q, list) and not all(isinstance(x, str) for x in q):
            raise ValueError("recall entry: field 'query' must be a string or a list of strings")
        if isinstance(op.get("config"), (dict, type(None))) is False:
            raise ValueError("recall entry: field 'config' must be an object of RecallConfig fields")
        if op.get("history") is not None and not isinstance(op["history"], bool):
            raise ValueError("recall entry: field 'history' must be true, false or null")
        b64 = op.get("query_embeddings_b64")
        if b64 is not None and not isinstance(b64, str):
            raise ValueError("recall entry: field 'query_embeddings_b64' must be a base64 string")
    if kind in ("reinforce", "demote", "forget") and not all(isinstance(e, int) and not isinstance(e, bool) for e in op["edges"]):
        raise ValueError(f"{kind} entry: field 'edges' must be a list of edge ids")
    if kind == "maintain" and op["steps"] is not None and not all(isinstance(x, str) for x in op["steps"]):
        raise ValueError("maintain entry: field 'steps' must be a list of step names or null")


def _state_differences(a: dict, b: dict) -> list[str]:
    """Names of the state parts that differ (empty: identical)."""
    out = []
    for part in ("nodes", "edges"):
        if a[part]["n"] != b[part]["n"]:
            out.append(f"{part}.n")
            continue
        if a[part].get("next_uid", a[part]["n"]) != b[part].get("next_uid", b[part]["n"]):
            out.append(f"{part}.next_uid")
        for k, v in a[part]["arrays"].items():
            if not np.array_equal(v, b[part]["arrays"][k]):
                out.append(f"{part}.{k}")
        for k, v in a[part]["lists"].items():
            if v != b[part]["lists"][k]:
                out.append(f"{part}.{k}")
    for k in ("emb", "rel_emb"):
        if a[k].shape != b[k].shape or not np.array_equal(a[k], b[k]):
            out.append(k)
    for k in ("rel_text", "coact", "tick"):
        if a[k] != b[k]:
            out.append(k)
    return out


def _aligned(a: dict, b: dict, part: str) -> tuple:
    """The ids of ``part`` in either state (sorted), and per id: its row in ``a`` and in ``b`` and
    whether it is alive there (rows of absent ids are clipped: read them only where alive)."""
    A, B = a[part]["arrays"], b[part]["arrays"]
    ids = np.union1d(A["uid"], B["uid"])
    out = [ids]
    for arr in (A, B):
        u = arr["uid"]
        r = np.minimum(np.searchsorted(u, ids), max(u.size - 1, 0))
        alive = (u[r] == ids) & arr["alive"][r] if u.size else np.zeros(ids.size, dtype=bool)
        out += [r, alive]
    return tuple(out)


def _diff_states(a: dict, b: dict, atol: float) -> GraphDiff:
    """What changed from state ``a`` to state ``b``, matched by id (rows may differ: compaction)."""
    d = GraphDiff()
    na, nb = a["nodes"]["arrays"], b["nodes"]["arrays"]

    def nid(arr, r, i):
        return ("ep" if arr["kind"][r] == KIND_EPISODE else "n") + str(int(i))

    ids, ra, la, rb, lb = _aligned(a, b, "nodes")
    d.nodes_added = [nid(nb, r, i) for i, r in zip(ids[lb & ~la].tolist(), rb[lb & ~la].tolist())]
    d.nodes_removed = [nid(na, r, i) for i, r in zip(ids[la & ~lb].tolist(), ra[la & ~lb].tolist())]
    both = la & lb
    for i, r1, r2 in zip(ids[both].tolist(), ra[both].tolist(), rb[both].tolist()):
        changed = [k for k in ("stage", "importance", "surprise", "access", "last_access", "permanent", "cluster")
                   if na[k][r1] != nb[k][r2]]
        if changed:
            d.node_changed[nid(nb, r2, i)] = changed
    ea, eb = a["edges"]["arrays"], b["edges"]["arrays"]
    ids, ra, la, rb, lb = _aligned(a, b, "edges")
    d.edges_added = ids[lb & ~la].tolist()
    d.edges_removed = ids[la & ~lb].tolist()
    both = la & lb
    va, vb = ea["valid"][ra] if ea["valid"].size else la, eb["valid"][rb] if eb["valid"].size else lb
    d.edges_invalidated = ids[both & va & ~vb].tolist()
    d.edges_revalidated = ids[both & ~va & vb].tolist()
    if both.any():
        sa, sb = ea["strength"][ra], eb["strength"][rb]
        ch = both & (np.abs(sa - sb) > atol)
        for i, x, y in zip(ids[ch].tolist(), sa[ch].tolist(), sb[ch].tolist()):
            d.strength_changed[i] = (float(x), float(y))
    return d


def _replace_dynamics(cfg: GraphConfig, **kw) -> GraphConfig:
    """``dataclasses.replace`` on the dynamics part (used by the explorer)."""
    return replace(cfg, dynamics=replace(cfg.dynamics, **kw))
