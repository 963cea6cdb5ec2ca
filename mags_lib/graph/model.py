"""Result and report data classes of the Liquid Knowledge Graph."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "Anchor",
    "EngramReport",
    "GraphDiff",
    "GraphFormatError",
    "MaintainReport",
    "Recall",
    "RecallItem",
    "RecallTrace",
    "TracePath",
]


class GraphFormatError(ValueError):
    """A saved graph directory is missing, corrupt, truncated, foreign or of an unknown version."""


@dataclass(frozen=True)
class RecallItem:
    """One recalled fact or episode.

    Attributes
    ----------
    text : str
        ``"subject relation object"`` for a fact, the episode text for an episode.
    triplet : tuple of str or None
        ``(subject, relation, object)`` for a fact, None for an episode.
    score : float
        Ranking score (higher is better).
    sources : tuple of str
        Source ids (e.g. ``"D1:3"``) of the inputs this item came from.
    path : tuple of str
        Node ids from the anchor to the item (the fact's far end, or the episode).
    kind : str
        ``"fact"`` or ``"episode"``.
    edges : tuple of int
        Edge ids along ``path`` (used by :meth:`LiquidGraph.reinforce`).
    edge_id : int or None
        The fact's own edge id (None for an episode).
    node_id : str or None
        The episode's node id (None for a fact).
    current : bool
        False for a superseded fact (returned only when the query asks about the past, see
        :func:`mags_lib.graph.recall.recall`); True otherwise.
    valid_from, valid_to : str or int or None
        A fact's validity interval: the times (ISO strings, as the observations gave them) it was
        first said and it was superseded; ticks where no time was given; ``valid_to`` is None while
        the fact holds. An episode's ``valid_from`` is its time.
    """

    text: str
    triplet: tuple[str, str, str] | None
    score: float
    sources: tuple[str, ...]
    path: tuple[str, ...]
    kind: str
    edges: tuple[int, ...] = ()
    edge_id: int | None = None
    node_id: str | None = None
    current: bool = True
    valid_from: str | int | None = None
    valid_to: str | int | None = None


@dataclass(frozen=True)
class Anchor:
    """A chosen anchor: node id, text, the query it answers, its similarity and coverage gain."""

    node: str
    text: str
    query: int
    similarity: float
    gain: float


@dataclass(frozen=True)
class TracePath:
    """One traversed path: node ids, edge ids, the product of edge strengths along it."""

    nodes: tuple[str, ...]
    edges: tuple[int, ...]
    weight: float


@dataclass
class RecallTrace:
    """Everything a recall did, for display and for reinforcement.

    Attributes
    ----------
    queries : list of str
    candidates : list of (node id, query index, similarity)
        Over-queried anchor candidates.
    anchors : list of Anchor
    paths : list of TracePath
        The path that reached each returned item (same order as the items).
    edge_weights : dict
        Edge id -> best path weight reaching it.
    node_weights : dict
        Node id -> best path weight reaching it.
    """

    queries: list[str]
    candidates: list[tuple[str, int, float]] = field(default_factory=list)
    anchors: list[Anchor] = field(default_factory=list)
    paths: list[TracePath] = field(default_factory=list)
    edge_weights: dict[int, float] = field(default_factory=dict)
    node_weights: dict[str, float] = field(default_factory=dict)

    @property
    def anchor_ids(self) -> list[str]:
        """Node ids of the anchors."""
        return [a.node for a in self.anchors]


@dataclass
class Recall:
    """The answer of :meth:`LiquidGraph.recall`: ranked items and the trace."""

    items: list[RecallItem]
    trace: RecallTrace

    def texts(self) -> list[str]:
        """The items' texts, best first."""
        return [it.text for it in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)


@dataclass
class EngramReport:
    """What one :meth:`LiquidGraph.engram` call did."""

    n_triplets: int = 0
    new_nodes: list[str] = field(default_factory=list)
    resolved: list[tuple[str, str, float]] = field(default_factory=list)  # (text, node id, similarity)
    new_edges: list[int] = field(default_factory=list)
    reinforced_edges: list[int] = field(default_factory=list)
    invalidated_edges: list[int] = field(default_factory=list)  # superseded by newer evidence
    rejected_edges: list[int] = field(default_factory=list)  # stored invalid: older fact was stronger
    association_edges: list[int] = field(default_factory=list)  # GAT-inspired initial edges
    skipped: list[tuple[tuple, str]] = field(default_factory=list)  # (triplet, why)


@dataclass
class MaintainReport:
    """What one :meth:`LiquidGraph.maintain` tick did, step by step."""

    tick: int
    steps: dict[str, dict] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    n_nodes: int = 0
    n_edges: int = 0
    compacted: dict | None = None  # what LiquidGraph.compact() did after the steps (None: not run)

    @property
    def total_seconds(self) -> float:
        return float(sum(self.seconds.values()))


@dataclass
class GraphDiff:
    """Difference between two graph states (``a`` -> ``b``)."""

    nodes_added: list[str] = field(default_factory=list)
    nodes_removed: list[str] = field(default_factory=list)
    edges_added: list[int] = field(default_factory=list)
    edges_removed: list[int] = field(default_factory=list)
    edges_invalidated: list[int] = field(default_factory=list)
    edges_revalidated: list[int] = field(default_factory=list)
    strength_changed: dict[int, tuple[float, float]] = field(default_factory=dict)
    node_changed: dict[str, list[str]] = field(default_factory=dict)  # node id -> changed fields

    @property
    def empty(self) -> bool:
        return not any((self.nodes_added, self.nodes_removed, self.edges_added, self.edges_removed,
                        self.edges_invalidated, self.edges_revalidated, self.strength_changed,
                        self.node_changed))

    def summary(self) -> dict[str, int]:
        """Counts per kind of change."""
        return {
            "nodes_added": len(self.nodes_added),
            "nodes_removed": len(self.nodes_removed),
            "edges_added": len(self.edges_added),
            "edges_removed": len(self.edges_removed),
            "edges_invalidated": len(self.edges_invalidated),
            "edges_revalidated": len(self.edges_revalidated),
            "strength_changed": len(self.strength_changed),
            "nodes_changed": len(self.node_changed),
        }
