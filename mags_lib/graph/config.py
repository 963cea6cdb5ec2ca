"""Configuration dataclasses of the Liquid Knowledge Graph, one per operation.

Every knob of every operation lives here, with its meaning in the field comment and its range
checked in ``__post_init__``. Ablations are configurations::

    from dataclasses import replace
    cfg = GraphConfig()
    no_gol = replace(cfg, dynamics=replace(cfg.dynamics, game_of_life=False))
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields

__all__ = [
    "DEFAULT_FUNCTIONAL",
    "DEFAULT_MULTI_VALUED",
    "DEFAULT_PAST_MARKERS",
    "DEFAULT_SAME_SLOT",
    "DynamicsConfig",
    "EngramConfig",
    "GraphConfig",
    "IndexConfig",
    "LimitsConfig",
    "RecallConfig",
    "coerce_fields",
]

# Relations that may legitimately hold several objects at once (never treated as conflicts when
# ``EngramConfig.functional == "all"``). Compared after normalisation (lower case, no articles).
DEFAULT_MULTI_VALUED: frozenset[str] = frozenset(
    {
        "like", "likes", "love", "loves", "enjoy", "enjoys", "has", "have", "know", "knows",
        "visited", "visit", "visits", "met", "owns", "own", "friend of", "is friend of",
        "related to", "mentions", "include", "includes", "contains", "played", "plays", "uses",
        "read", "reads", "went to", "attended",
        # declared multi-valued (issue 12): fears, abilities, pets, siblings, children, friends
        "are afraid of", "is afraid of", "afraid of", "fear", "fears", "can", "has pet", "have pet",
        "has sibling", "have sibling", "has child", "has children", "has friend", "has friends",
        "bought", "buy", "buys", "made", "makes",
        # the game worlds' other multi-valued relations (mags_lib.data.templates, functional=False)
        "build nests from", "live for", "have natural enemy", "is allergic to", "is near", "is famous for",
        "is made of",
        # nearness: being near one place never says where a thing is, nor that it is near nothing else
        # ("lives near X" is no new home; by embedding it is closest to "lives in")
        "lives near", "live near", "is close to", "lies near", "is next to", "near",
    }
)
# ``eat`` is single-valued: in the game's worlds a species' diet is a rule ("blorps eat only frozen
# lemons") that changes, and the generator's ground truth counts a new diet as an update. A second
# food stated in the same observation never supersedes the first (one observation never supersedes
# its own facts), and an older statement ingested later is kept as history.

DEFAULT_FUNCTIONAL: frozenset[str] = frozenset(
    {
        # the game worlds' single-valued relations (mags_lib.data.templates, functional=True), but
        # "enjoys" (a hobby there, multi-valued in general English: DEFAULT_MULTI_VALUED wins)
        "eat", "live in", "have color", "sleep for", "are led by", "works as", "lives in", "likes to eat",
        "has age", "has climate", "starts players with", "is won at", "is played with", "has referee",
        "on a double roll players", "is held in", "takes place in", "is organized by", "is kept in",
        "is owned by",
    }
)
"""Declared single-valued relations: the only functional ones in ``EngramConfig.functional ==
"listed"`` mode; in either mode, with the other declared lists, the known relations an undeclared
relation is compared with by meaning (``EngramConfig.slot_similarity``)."""

DEFAULT_SAME_SLOT: frozenset[str] = frozenset(
    {
        "lives in|live in|moved to|move to|moves to|resides in|relocated to|is living in|lived in|now lives in",
        "works as|work as|is employed as|job is|works as a|became",
        "works at|work at|is employed at|works for|work for|joined",
        "is married to|married|is wife of|is husband of",
        "eat|eats|ate|feed on|feeds on|diet is",
    }
)
"""Declared schema: relations of one group (``|``-separated) name the same single-valued slot, so
a new object under one supersedes the object under another ("moved to Boston" / "lives in Denver")."""


DEFAULT_PAST_MARKERS: frozenset[str] = frozenset(
    {
        "before", "used to", "previously", "previous", "formerly", "former", "earlier", "in the past",
        "originally", "at first", "at the time", "back then", "back in", "no longer", "anymore", "any more",
        "prior to", "history", "past", "changed",
    }
)
"""Phrases (whole words, compared after :func:`~mags_lib.graph.core.norm_key`) that make a query ask
about the past, so that recall in ``history="auto"`` mode also returns superseded facts: "What did
blorps eat before?", "Where did Caroline use to live?". A year in the query ("in 2022") does too."""


def coerce_fields(obj) -> None:
    """Check the type of every field of a frozen config dataclass and normalise it in place.

    Driven by the field annotations: ``bool`` fields take True/False (numpy bools too); ``int``
    fields take integers (numpy integers become ``int``; floats such as 2.5, strings and bools are
    refused); ``float`` fields take finite real numbers (numpy scalars and ints become ``float``);
    ``str`` fields take strings; ``frozenset[str]`` fields take any collection of strings; ``X |
    None`` also takes None. Other annotations are left to the class's own checks. Errors name the
    class and the field, so a hand-edited saved config says what is wrong.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class C:
    ...     k: int = 1
    ...     def __post_init__(self):
    ...         coerce_fields(self)
    >>> C(k=2.5)
    Traceback (most recent call last):
    ...
    TypeError: C.k must be an integer, got 2.5
    """
    import numpy as np

    cls = type(obj).__name__
    specs = _FIELD_SPECS.get(type(obj))
    if specs is None:
        specs = []
        for f in fields(obj):
            t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            parts = [p.strip() for p in t.split("|")]
            base = next((p for p in parts if p != "None"), "None")
            base = "frozenset" if base.startswith("frozenset") else base
            if base in ("bool", "int", "float", "str", "frozenset"):
                specs.append((f.name, base, "None" in parts))
        _FIELD_SPECS[type(obj)] = specs
    for name, base, optional in specs:
        v = getattr(obj, name)
        if v is None and optional:
            continue
        if type(v) is _PLAIN.get(base) and (base != "float" or math.isfinite(v)):
            continue  # already a plain value of the right type
        where = f"{cls}.{name}"
        if base == "bool":
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{where} must be True or False, got {v!r}")
            v = bool(v)
        elif base == "int":
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{where} must be an integer{' or None' if optional else ''}, got {v!r}")
            v = int(v)
        elif base == "float":
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
                raise TypeError(f"{where} must be a number{' or None' if optional else ''}, got {v!r}")
            v = float(v)
            if not math.isfinite(v):
                raise ValueError(f"{where} must be a finite number, got {v!r}")
        elif base == "str":
            if not isinstance(v, str):
                raise TypeError(f"{where} must be a string, got {v!r}")
            v = str(v)
        elif base == "frozenset":
            if isinstance(v, (str, bytes)) or not isinstance(v, (set, frozenset, list, tuple)):
                raise TypeError(f"{where} must be a collection of strings, got {v!r}")
            if not all(isinstance(x, str) for x in v):
                raise TypeError(f"{where} must hold strings only, got {sorted(map(repr, v))}")
            from .values import clean_text  # lone surrogates -> U+FFFD, as every other text: the config is saved

            v = frozenset(clean_text(x, where, allow_empty=True) for x in v)
        object.__setattr__(obj, name, v)


_FIELD_SPECS: dict[type, list[tuple[str, str, bool]]] = {}
_PLAIN = {"bool": bool, "int": int, "float": float, "str": str}


def _check_unit(name: str, value: float, *, open_low: bool = False, open_high: bool = False) -> None:
    lo_ok = value > 0 if open_low else value >= 0
    hi_ok = value < 1 if open_high else value <= 1
    if not (lo_ok and hi_ok):
        lo = "(0" if open_low else "[0"
        hi = "1)" if open_high else "1]"
        raise ValueError(f"{name} must be in {lo}, {hi}, got {value!r}")


def _check_pos(name: str, value: float, *, strict: bool = True) -> None:
    if not (value > 0 if strict else value >= 0):
        raise ValueError(f"{name} must be {'> 0' if strict else '>= 0'}, got {value!r}")


@dataclass(frozen=True)
class IndexConfig:
    """Vector index over node embeddings.

    Exact search (one matrix product) below ``approx_threshold`` nodes per block; above it an
    approximate HNSW index (usearch) is built and kept in sync, switched back to exact under
    ``approx_threshold // 2`` nodes (hysteresis).
    """

    approx_threshold: int = 10_000  # nodes in a block above which the approximate index is used
    flush_size: int = 1024  # new rows buffered (searched exactly) before one batched HNSW insert
    connectivity: int = 12  # HNSW graph degree (usearch M)
    expansion_add: int = 48  # HNSW ef_construction
    expansion_search: int = 128  # HNSW ef for recall queries (candidates are re-scored exactly)
    expansion_resolve: int = 32  # HNSW ef for engram's entity resolution (near duplicates are easy to find)
    dtype: str = "i8"  # HNSW vector storage: "i8" (quantised), "f16" or "f32"; results are re-scored exactly
    threads: int = 0  # threads for batch add/search (0: all cores; 1: reproducible HNSW inserts)
    lexical: bool = True  # keep a BM25 index of node texts per block (mags_lib.graph.lexical) for hybrid
    # recall (RecallConfig.lexical_weight); off: no index is kept and recall ranks by cosine alone
    lexical_stopwords: str = "en_plus"  # words the lexical index ignores: "en_plus" (179 English words, question
    # words included), "en" (33, the LoCoMo BM25 baseline's) or "none"

    def __post_init__(self) -> None:
        coerce_fields(self)
        if self.approx_threshold < 2:
            raise ValueError(f"approx_threshold must be >= 2, got {self.approx_threshold}")
        for name in ("connectivity", "expansion_add", "expansion_search", "expansion_resolve"):
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be >= 2, got {getattr(self, name)}")
        if self.dtype not in ("i8", "f16", "f32"):
            raise ValueError(f"dtype must be 'i8', 'f16' or 'f32', got {self.dtype!r}")
        if self.flush_size < 1:
            raise ValueError(f"flush_size must be >= 1, got {self.flush_size}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, got {self.threads}")
        if self.lexical_stopwords not in ("en", "en_plus", "none"):
            raise ValueError(f"lexical_stopwords must be 'en', 'en_plus' or 'none', got {self.lexical_stopwords!r}")


@dataclass(frozen=True)
class EngramConfig:
    """Engram (write) step: entity resolution, initial edges, reconciliation, episodes."""

    resolve_threshold: float = 0.90  # cosine at/above which an entity is the same node (update/merge)
    typed_resolution: bool = True  # dates/times/numbers match exactly, short names share words (engram.same_kind)
    short_name_threshold: float = 0.95  # short names sharing no word merge only at/above this cosine
    init_strength: float = 0.5  # strength of a new fact edge
    init_confidence: float = 0.7  # confidence of a new fact edge
    repeat_gain: float = 0.2  # a repeated fact: strength += repeat_gain * (1 - strength)
    init_importance: float = 0.3  # importance of a new node unless the caller gives one
    novelty_surprise: float = 0.5  # surprise of a new node = this * (1 - similarity to its nearest entity)
    # GAT-inspired initial edges of a new entity: attention over its nearest existing entities
    gat: bool = True  # add attention-weighted association edges for new entities
    gat_k: int = 3  # neighbours attended to
    gat_min_similarity: float = 0.6  # neighbours below this cosine get no edge
    gat_temperature: float = 0.1  # softmax temperature of the attention logits
    gat_max_strength: float = 0.5  # edge strength = gat_max_strength * attention * cosine
    gat_min_strength: float = 0.05  # association edges weaker than this are not created
    # reconciliation of conflicting facts (same subject and relation, different object)
    reconcile: bool = True  # invalidate superseded facts; False keeps every object valid
    functional: str = "all"  # "all": every relation but multi_valued; "listed": only functional_relations
    functional_relations: frozenset[str] = DEFAULT_FUNCTIONAL  # single-valued relations (mode "listed")
    multi_valued_relations: frozenset[str] = DEFAULT_MULTI_VALUED  # never conflicts (mode "all")
    same_slot_relations: frozenset[str] = DEFAULT_SAME_SLOT  # "a|b|c": relations naming one slot
    # a relation named in none of the three lists takes the slot and the class (single- or multi-valued)
    # of the most similar declared relation label at/above this cosine of the relation-label embeddings,
    # else stays its own slot with the mode's default (engram.relation_kind); > 1 switches it off.
    # 0.55: best F1 on the game worlds' relation paraphrases with MiniLM (python -m mags_lib.bench.relations)
    slot_similarity: float = 0.55
    conflict_policy: str = "newer"  # "newer": new evidence wins; "stronger": the stronger edge wins
    time_order: bool = True  # a fact said earlier (episode time) than its rival never supersedes it
    conflict_surprise: float = 1.0  # surprise given to the endpoints of a conflicting fact
    # episodes
    link_episodes: bool = True  # link an episode node to the entities of the facts it produced
    episode_link_strength: float = 0.5  # strength of episode -> entity edges
    superseded_episode_confidence: float = 0.5  # episodes of a superseded fact: confidence at most this ...
    compound_superseded: bool = False  # ... or multiplied by it at every superseded fact (before 2026-12-01: an
    # episode two of whose facts were superseded fell to 0.25 and left LoCoMo's top 10 with what the facts lost)
    max_provenance: int | None = 8  # episode (and source) ids kept per edge: the first and the newest
    # max_provenance - 1; restatements dropped from the lists are counted (edge provenance_dropped); None: all

    def __post_init__(self) -> None:
        coerce_fields(self)
        _check_unit("resolve_threshold", self.resolve_threshold, open_low=True)
        _check_unit("short_name_threshold", self.short_name_threshold, open_low=True)
        _check_unit("init_strength", self.init_strength, open_low=True)
        _check_unit("init_confidence", self.init_confidence, open_low=True)
        _check_unit("repeat_gain", self.repeat_gain)
        _check_unit("init_importance", self.init_importance)
        _check_unit("novelty_surprise", self.novelty_surprise)
        if self.gat_k < 1:
            raise ValueError(f"gat_k must be >= 1, got {self.gat_k}")
        if not -1.0 <= self.gat_min_similarity <= 1.0:
            raise ValueError(f"gat_min_similarity must be in [-1, 1], got {self.gat_min_similarity}")
        _check_pos("gat_temperature", self.gat_temperature)
        _check_unit("gat_max_strength", self.gat_max_strength, open_low=True)
        _check_unit("gat_min_strength", self.gat_min_strength, open_low=True)
        if self.functional not in ("all", "listed"):
            raise ValueError(f"functional must be 'all' or 'listed', got {self.functional!r}")
        if self.conflict_policy not in ("newer", "stronger"):
            raise ValueError(f"conflict_policy must be 'newer' or 'stronger', got {self.conflict_policy!r}")
        _check_unit("conflict_surprise", self.conflict_surprise)
        _check_unit("episode_link_strength", self.episode_link_strength, open_low=True)
        _check_unit("superseded_episode_confidence", self.superseded_episode_confidence)
        if self.max_provenance is not None and self.max_provenance < 2:
            raise ValueError(f"max_provenance must be None or >= 2 (the first and the newest), got {self.max_provenance}")
        if not -1.0 <= self.slot_similarity <= 2.0:
            raise ValueError(f"slot_similarity must be in [-1, 2] (> 1: off), got {self.slot_similarity}")

    def slot(self, relation_key: str) -> str:
        """The slot a (normalised) relation writes: its group's first name, or itself."""
        cache = self.__dict__.get("_slot_cache")
        if cache is None:
            from .core import norm_key

            cache = {}
            for group in sorted(self.same_slot_relations):
                names = [norm_key(x) for x in group.split("|") if x.strip()]
                for n in names:
                    cache.setdefault(n, names[0])
            object.__setattr__(self, "_slot_cache", cache)
        return cache.get(relation_key, relation_key)

    def declared(self, relation_key: str) -> bool:
        """Whether a (normalised) relation is named in one of the declared lists."""
        self.declared_relations()
        return relation_key in self.__dict__["_declared_set"]

    def declared_relations(self) -> tuple[str, ...]:
        """Every (normalised) relation named in the declared lists, sorted."""
        cache = self.__dict__.get("_declared_cache")
        if cache is None:
            from .core import norm_key

            names = set(self.functional_relations) | set(self.multi_valued_relations)
            names |= {x for group in self.same_slot_relations for x in group.split("|")}
            cache = tuple(sorted({norm_key(x) for x in names if x.strip()}))
            object.__setattr__(self, "_declared_cache", cache)
            object.__setattr__(self, "_declared_set", frozenset(cache))
        return cache

    def is_functional(self, relation_key: str) -> bool:
        """Whether a (normalised) relation holds one object at a time, so a new object supersedes."""
        cache = self.__dict__.get("_func_cache")
        if cache is None:
            from .core import norm_key

            cache = ({norm_key(r) for r in self.functional_relations},
                     {norm_key(r) for r in self.multi_valued_relations})
            object.__setattr__(self, "_func_cache", cache)
        if self.functional == "listed":
            return relation_key in cache[0]
        return relation_key not in cache[1]


@dataclass(frozen=True)
class RecallConfig:
    """Recall (read) step: anchors, coverage, traversal, scoring."""

    n_anchors: int = 4  # anchors chosen per query at least ...
    anchors_per_k: float = 1.0  # ... and ceil(anchors_per_k * k) when more, so k items can be found even when
    # anchors have no edges (a memory of episodes); 0: always n_anchors (the fixed count, the ablation)
    overquery: int = 4  # candidates = overquery * anchors, per block (entities, episodes) and query
    lexical_weight: float = 0.5  # hybrid anchors and relevance: a node's score for a query is
    # (1 - w) * cosine + w * top_cosine * bm25 / top_bm25 (top_cosine: the query's best candidate cosine;
    # top_bm25: the best BM25 score in the node's block; a fact: its subject + relation + object text), so
    # a rare name the embedder misses still anchors; a block's candidates are its cosine and BM25 top
    # lists united; 0: cosine alone (the ablation; also when IndexConfig.lexical is off)
    bm25_k1: float = 1.2  # BM25 term-frequency saturation of the lexical score
    bm25_b: float = 0.5  # BM25 document-length normalisation of the lexical score
    episode_context: float = 0.5  # an episode's relevance is max(own, (1 - c) * own + c * near), near the
    # best of its neighbours' (the episodes observed up to episode_window places before and after it: the
    # question a reply answers, the reply to a question): lifted by its context, never lowered; the
    # candidates' neighbours join the candidates; 0: each episode on its own (the ablation)
    episode_window: int = 2  # the neighbours of episode_context: the episodes up to this many places before
    # and after (1: just before and just after)
    coverage_weight: float = 0.5  # 0: pure similarity; 1: anchor gain fully scaled by new coverage
    min_anchor_similarity: float = 0.0  # candidates below this cosine are never anchors
    traversal: str = "bfs"  # "bfs" or "dfs"
    min_path_strength: float = 0.05  # stop a path when the product of its edge strengths falls below
    max_depth: int = 3  # hops from an anchor
    max_branch: int = 8  # edges followed out of one node (the best by branch_query_weight's order)
    branch_query_weight: float = 0.7  # a node with more than max_branch edges to follow: follow those with
    # the best (1 - w) * strength + w * cos(query, e_relation + e_neighbour); 0: the strongest (ablation)
    max_visits: int = 64  # edges expanded per anchor (latency bound) ...
    max_total_visits: int = 256  # ... and at most this many per query, shared evenly by its anchors (the bound
    # when anchors scale with k: 4 anchors expand 64 edges each, 25 anchors 10 each)
    direction: str = "both"  # follow edges "out" of a node only, or "both" ways
    relevance_weight: float = 0.7  # score = ((1-w) * anchor_sim * path + w * relevance) * (1 + confidence) / 2
    source_weight: float = 0.25  # a fact's relevance is (1 - s) * its own + s * the best relevance of the alive
    # episodes it was drawn from (the turn that said it, with its context): a fact that matches the query by a
    # name alone, said in a turn about something else, is grounded by that turn; facts with no alive source
    # episode keep their own; 0: the fact alone (the default before 2026-12-04; s chosen on LoCoMo's tuning pair,
    # README, LoCoMo, "A memory of episodes ranks by score")
    include_episodes: bool = True  # episodes can be anchors and results
    candidate_episodes: bool = True  # the best ceil(anchors) episode candidates of each query are results even
    # when entity anchors took their anchor places (scored as anchors are); False: only anchors and reached
    max_episode_share: float = 0.5  # routing: at most this share of k are episodes (unless facts run out) ...
    # (1.0: no places reserved for facts, facts and episodes ranked by score alone, whatever the memory holds)
    episode_share_by_memory: bool = True  # ... or more: facts keep at most ceil(f * k) places, f their share of the
    # memory's alive episodes and valid facts (a conversation the writer drew few facts from); False: the fixed share
    min_fact_share: float = 0.3  # ... and a memory whose facts are fewer than this share of it (a memory of
    # episodes: LoCoMo's ten hold 9-24 % facts, the game's scenarios a median of 44 %) reserves no place for facts:
    # they and the turns are ranked by score alone (facts grounded in their turns, source_weight); 0: always reserve
    touch: bool = True  # update access counts/last-access of returned nodes and edges
    coactivation: bool = True  # record co-activation for Hebbian strengthening at the next maintain
    # history: superseded facts (valid=False) reached through their subject or object
    history: str = "auto"  # "off": never returned; "auto": when a query asks about the past; "on": always
    past_markers: frozenset[str] = DEFAULT_PAST_MARKERS  # "auto": phrases that ask about the past (or a year)
    history_weight: float = 0.5  # superseded facts' score multiplier when the query does not ask about the past
    year_weight: float = 0.5  # a query naming a year: items whose validity interval misses that year score *= this

    def __post_init__(self) -> None:
        coerce_fields(self)
        if self.n_anchors < 1:
            raise ValueError(f"n_anchors must be >= 1, got {self.n_anchors}")
        if self.overquery < 1:
            raise ValueError(f"overquery must be >= 1, got {self.overquery}")
        if not math.isfinite(self.anchors_per_k) or not 0 <= self.anchors_per_k <= 1000:
            raise ValueError(f"anchors_per_k must be in [0, 1000] (anchors per item asked for), got {self.anchors_per_k}")
        _check_unit("lexical_weight", self.lexical_weight)
        _check_unit("episode_context", self.episode_context)
        _check_pos("bm25_k1", self.bm25_k1)
        _check_unit("bm25_b", self.bm25_b)
        _check_unit("coverage_weight", self.coverage_weight)
        if not -1.0 <= self.min_anchor_similarity <= 1.0:
            raise ValueError(f"min_anchor_similarity must be in [-1, 1], got {self.min_anchor_similarity}")
        if self.traversal not in ("bfs", "dfs"):
            raise ValueError(f"traversal must be 'bfs' or 'dfs', got {self.traversal!r}")
        _check_unit("min_path_strength", self.min_path_strength, open_low=True)
        for name in ("episode_window", "max_depth", "max_branch", "max_visits", "max_total_visits"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.direction not in ("out", "both"):
            raise ValueError(f"direction must be 'out' or 'both', got {self.direction!r}")
        _check_unit("relevance_weight", self.relevance_weight)
        _check_unit("source_weight", self.source_weight)
        _check_unit("branch_query_weight", self.branch_query_weight)
        _check_unit("max_episode_share", self.max_episode_share)
        _check_unit("min_fact_share", self.min_fact_share)
        if self.history not in ("off", "auto", "on"):
            raise ValueError(f"history must be 'off', 'auto' or 'on', got {self.history!r}")
        _check_unit("history_weight", self.history_weight)
        _check_unit("year_weight", self.year_weight)


@dataclass(frozen=True)
class DynamicsConfig:
    """Dynamics run by ``maintain`` (one tick); every step has an on/off switch."""

    # step switches, in the order maintain runs them
    hebbian: bool = True  # strengthen co-activated edges and connect co-activated anchors
    decay: bool = True  # exponential decay with recency correction
    game_of_life: bool = True  # neighbourhood rule on nodes' live-edge counts
    kcore: bool = True  # k-core consolidation of central nodes
    scc: bool = True  # strongly-connected-component consolidation (cluster, strengthen, merge)
    solidify: bool = True  # very strong, often used edges become permanent
    promote: bool = True  # working memory -> long-term promotion
    prune: bool = True  # weak edges, inactive or isolated nodes, capacity limits
    # Hebbian / reward
    hebbian_rate: float = 0.2  # per activation: s += rate * (1 - s)
    anchor_link_strength: float = 0.1  # initial strength of a new anchor-anchor association edge
    reward_rate: float = 0.3  # reinforce(): s += rate * reward * (1 - s) (reward > 0) or s *= 1 + rate * reward
    # decay (protection = the larger of recency and salience protection)
    decay_rate: float = 0.01  # per tick: s *= 1 - rate * (1 - protection)
    recency_protection: float = 0.8  # share of decay cancelled for an edge used just now
    recency_tau: float = 5.0  # ticks over which the recency protection fades (exp(-age / tau))
    salience_protection: float = 0.8  # share of decay cancelled for an edge of salience 1; salience = the larger
    # of min over its ends of max(importance, surprise) and of its usage uses / (uses + salience_uses_half)
    salience_uses_half: float = 2.0  # uses (recalls, restatements) at which usage counts as salience 0.5
    keep_salience: float | None = 0.6  # fact edges at/above this salience decay no lower than keep_strength
    # and are never pruned for weakness (capacity limits still apply); None: off
    keep_strength: float = 0.1  # the strength salient facts keep (>= RecallConfig.min_path_strength: still followed)
    # Game-of-Life rule (live edge: strength >= gol_live_strength)
    gol_live_strength: float = 0.3
    gol_survive_min: int = 1  # fewer live edges: the node is lonely, its edges weaken
    gol_survive_max: int = 12  # more live edges: the node is overcrowded, its edges weaken
    gol_rate: float = 0.05  # lonely/crowded nodes: their edges get factor 1 - rate
    gol_survive_gain: float = 0.0  # surviving nodes: factor 1 + gain (capped at strength 1); 0 = unchanged
    gol_birth: bool = True  # recently active pairs with >= gol_birth_common live common neighbours connect
    gol_birth_common: int = 2
    gol_birth_strength: float = 0.2
    gol_max_births: int = 64  # births per tick
    # k-core
    kcore_min_k: int = 2  # consolidate the main core only if its k is at least this
    kcore_rate: float = 0.05  # internal edges of the main core: s += rate * (1 - s)
    kcore_max_share: float = 0.5  # skip when the main core holds more than this share of the entities
    kcore_importance: float = 0.1  # core nodes: importance += this * (1 - importance)
    # SCC
    scc_min_size: int = 2
    scc_rate: float = 0.1  # internal edges of a strongly connected component: s += rate * (1 - s)
    scc_merge_similarity: float = 0.8  # members of one SCC at/above this cosine are merged
    # solidification
    solidify_strength: float = 0.95
    solidify_min_uses: int = 3
    solidify_node_edges: int = 3  # a node with this many permanent edges becomes permanent
    # promotion (working memory -> long term)
    promote_uses: int = 2
    promote_surprise: float = 0.8
    promote_importance: float = 0.6
    working_capacity: int | None = None  # working-memory nodes kept; the least recently used are forgotten
    # pruning
    prune_strength: float = 0.05  # edges weaker than this are removed (permanent ones exempt)
    inactive_ticks: int = 50  # nodes not accessed for this many ticks ...
    inactive_max_degree: int = 1  # ... and with at most this many edges are removed
    keep_evidence: bool = True  # never prune an episode that is the only live source of a valid fact, nor
    # (as inactive) an end of a valid fact: a fact goes by its own strength, then its nodes as isolated
    keep_unconsolidated: bool = True  # never prune as inactive an episode no valid fact stands for: none was
    # drawn from it (a memory of episodes, chit-chat the write model skipped), or its facts all decayed or were
    # superseded; it is the only record of what was said. It goes once a valid fact drawn from it has another
    # live source, or a fact from it was forgotten on purpose; capacity (max_nodes) still applies; False: idle
    # episodes go after inactive_ticks like any node (the ablation)
    isolated_grace: int = 1  # isolated nodes older than this many ticks are removed
    max_nodes: int | None = None  # capacity: nodes kept (least important non-permanent removed first)
    max_edges: int | None = None  # capacity: valid edges kept (weakest non-permanent removed first)

    def __post_init__(self) -> None:
        coerce_fields(self)
        for name in ("hebbian_rate", "reward_rate", "recency_protection", "kcore_rate", "kcore_importance",
                     "scc_rate"):
            _check_unit(name, getattr(self, name))
        for name in ("decay_rate", "gol_rate"):  # < 1 keeps every strength > 0
            _check_unit(name, getattr(self, name), open_high=True)
        for name in ("anchor_link_strength", "gol_live_strength", "gol_birth_strength", "solidify_strength"):
            _check_unit(name, getattr(self, name), open_low=True)
        _check_unit("prune_strength", self.prune_strength, open_high=True)
        _check_unit("salience_protection", self.salience_protection)
        _check_pos("salience_uses_half", self.salience_uses_half)
        if self.keep_salience is not None:
            _check_unit("keep_salience", self.keep_salience)
        _check_unit("keep_strength", self.keep_strength, open_low=True)
        _check_unit("promote_surprise", self.promote_surprise)
        _check_unit("kcore_max_share", self.kcore_max_share, open_low=True)
        _check_unit("gol_survive_gain", self.gol_survive_gain)
        _check_unit("promote_importance", self.promote_importance)
        if not -1.0 <= self.scc_merge_similarity <= 1.0:
            raise ValueError(f"scc_merge_similarity must be in [-1, 1], got {self.scc_merge_similarity}")
        _check_pos("recency_tau", self.recency_tau)
        for name in ("gol_survive_min", "gol_survive_max", "gol_birth_common", "gol_max_births",
                     "kcore_min_k", "solidify_min_uses", "promote_uses", "inactive_ticks",
                     "inactive_max_degree", "isolated_grace"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.gol_survive_max < self.gol_survive_min:
            raise ValueError("gol_survive_max must be >= gol_survive_min")
        if self.scc_min_size < 2:
            raise ValueError(f"scc_min_size must be >= 2, got {self.scc_min_size}")
        if self.solidify_node_edges < 1:
            raise ValueError(f"solidify_node_edges must be >= 1, got {self.solidify_node_edges}")
        for name in ("working_capacity", "max_nodes", "max_edges"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must be None or >= 0, got {v}")


@dataclass(frozen=True)
class LimitsConfig:
    """Bounds on what the memory keeps besides the graph itself (snapshots, log, co-activations, the
    dead rows of removed nodes and edges).

    The newest snapshot is always kept, even when it alone exceeds ``max_snapshot_bytes``. A snapshot
    holds a copy of the numeric columns (about 90 bytes per node and 110 per edge) and shares the
    embeddings and texts with the live graph; folding the log keeps one such copy as its base.
    """

    max_snapshots: int | None = 32  # in-memory snapshots kept; the oldest is dropped first (None: no limit)
    max_snapshot_bytes: int | None = 256 * 2**20  # total size of in-memory snapshots; oldest dropped first
    max_oplog_ops: int | None = 100_000  # ops in the log; beyond, the log is folded into a checkpointed
    # base state (replay = base state + log), so the log and replay time stay bounded
    max_coactivation: int = 10_000  # co-activated anchor pairs kept between maintain ticks (oldest dropped)
    compact_dead_share: float | None = 0.5  # maintain() compacts the stores (LiquidGraph.compact: drops
    # the rows of pruned and merged nodes and edges) once such rows pass this share of all rows; None: never
    compact_min_rows: int = 1024  # ... and only when the stores hold at least this many rows (nodes + edges)

    def __post_init__(self) -> None:
        coerce_fields(self)
        for name in ("max_snapshots", "max_snapshot_bytes", "max_oplog_ops"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be None or >= 1, got {v}")
        if self.max_coactivation < 0:
            raise ValueError(f"max_coactivation must be >= 0, got {self.max_coactivation}")
        if self.compact_dead_share is not None and not 0.0 < self.compact_dead_share < 1.0:
            raise ValueError(f"compact_dead_share must be None or in (0, 1), got {self.compact_dead_share!r}")
        if self.compact_min_rows < 0:
            raise ValueError(f"compact_min_rows must be >= 0, got {self.compact_min_rows}")


@dataclass(frozen=True)
class GraphConfig:
    """All knobs of a :class:`~mags_lib.graph.LiquidGraph`, one dataclass per operation."""

    engram: EngramConfig = field(default_factory=EngramConfig)
    recall: RecallConfig = field(default_factory=RecallConfig)
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    def __post_init__(self) -> None:
        for name, cls in _PARTS:
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"GraphConfig.{name} must be a {cls.__name__}, got {type(getattr(self, name)).__name__}")
        if self.dynamics.keep_strength < self.recall.min_path_strength:
            raise ValueError(f"dynamics.keep_strength ({self.dynamics.keep_strength}) must be >= "
                             f"recall.min_path_strength ({self.recall.min_path_strength}): a salient fact kept at "
                             "that strength would no longer be followed by recall")

    def to_dict(self) -> dict:
        """Plain-JSON form (sets become sorted lists); a new dict on every call."""
        out = {}
        for name, _ in _PARTS:
            part = getattr(self, name)
            out[name] = {f.name: (sorted(v) if isinstance(v, frozenset) else v)
                         for f in fields(part) for v in (getattr(part, f.name),)}
        return out

    @classmethod
    def from_dict(cls, d: dict) -> GraphConfig:
        """Inverse of :meth:`to_dict`; a missing part takes its defaults (saves older than it).

        Raises ``ValueError`` for unknown keys and ``TypeError`` / ``ValueError`` naming the field
        for a value of the wrong type or out of range.
        """
        if not isinstance(d, dict):
            raise TypeError(f"a GraphConfig dict must be a mapping of its parts, got {type(d).__name__}")
        parts = {}
        for name, sub in _PARTS:
            vals = d.get(name, {})
            if not isinstance(vals, dict):
                raise TypeError(f"GraphConfig.{name} must be a mapping of {sub.__name__} fields, "
                                f"got {type(vals).__name__}")
            known = set(sub.__dataclass_fields__)
            bad = set(vals) - known
            if bad:
                raise ValueError(f"unknown {name} config keys {sorted(bad)}; known: {sorted(known)}")
            parts[name] = sub(**vals)
        bad = set(d) - set(parts)
        if bad:
            raise ValueError(f"unknown GraphConfig keys {sorted(bad)}")
        return cls(**parts)


_PARTS = (("engram", EngramConfig), ("recall", RecallConfig), ("dynamics", DynamicsConfig),
          ("index", IndexConfig), ("limits", LimitsConfig))
