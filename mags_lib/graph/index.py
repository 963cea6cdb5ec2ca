"""Nearest-neighbour search over the node embedding matrix: exact, or approximate (usearch HNSW).

The embeddings live in one contiguous float32 matrix owned by the graph (one row per node id,
L2-normalised, so cosine = inner product). A :class:`VectorIndex` tracks which rows belong to one
block (entities, or episodes) and answers top-k queries:

* below ``IndexConfig.approx_threshold`` members: exact, one matrix product over the rows;
* at or above it: an approximate HNSW index (``usearch``, which supports removal), built once when
  the threshold is crossed and kept in sync on every add/remove; dropped again under half the
  threshold (hysteresis), so the switch is automatic in both directions.

The HNSW graph stores quantised vectors (``IndexConfig.dtype``, int8 by default: 4x less memory
and ~4x faster inserts and searches than float32 on this class of CPU); candidates are over-fetched
and re-scored exactly from the float32 matrix, so returned similarities are exact cosines.

New rows first go to a small *pending* buffer that is searched exactly and merged into the HNSW
graph in batches of ``IndexConfig.flush_size`` (one multi-threaded insert instead of many single
ones), so writes stay cheap at 100k+ nodes while every member is always searchable.
"""

from __future__ import annotations

import numpy as np

from .config import IndexConfig

__all__ = ["VectorIndex"]


class VectorIndex:
    """Top-k cosine search over a subset of the rows of an embedding matrix.

    Parameters
    ----------
    dim : int
        Embedding dimension.
    config : IndexConfig
        Thresholds and HNSW parameters.
    """

    def __init__(self, dim: int, config: IndexConfig | None = None):
        self.dim = int(dim)
        self.config = config or IndexConfig()
        self._member = np.zeros(0, dtype=bool)
        self._count = 0
        self._approx = None  # usearch.index.Index or None
        self._pending: dict[int, None] = {}  # members not yet inserted into the HNSW graph (ordered)

    # -- membership -------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    @property
    def approximate(self) -> bool:
        """True while the approximate (HNSW) index answers queries."""
        return self._approx is not None

    def _ensure(self, n: int) -> None:
        if n > self._member.shape[0]:
            new = np.zeros(max(n, 2 * self._member.shape[0], 64), dtype=bool)
            new[: self._member.shape[0]] = self._member
            self._member = new

    def members(self) -> np.ndarray:
        """Row ids currently in the index (sorted)."""
        return np.flatnonzero(self._member)

    def add(self, rows: np.ndarray, matrix: np.ndarray) -> None:
        """Add rows (node ids) whose vectors are ``matrix[rows]``."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size == 0:
            return
        self._ensure(int(rows.max()) + 1)
        fresh = rows[~self._member[rows]]
        fresh = np.unique(fresh)
        if fresh.size == 0:
            return
        self._member[fresh] = True
        self._count += int(fresh.size)
        if self._approx is not None:
            self._pending.update(dict.fromkeys(fresh.tolist()))
            if len(self._pending) >= self.config.flush_size:
                self.flush(matrix)
        elif self._count >= self.config.approx_threshold:
            self._build_approx(matrix)

    def flush(self, matrix: np.ndarray) -> None:
        """Insert the pending rows into the HNSW graph (no-op in exact mode)."""
        if self._approx is None or not self._pending:
            return
        rows = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
        self._pending = {}
        self._approx.add(rows.astype(np.uint64), np.ascontiguousarray(matrix[rows]),
                         threads=1 if rows.size <= 64 else self.config.threads)

    def remove(self, rows: np.ndarray) -> None:
        """Remove rows (ignores rows that are not members)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        rows = rows[rows < self._member.shape[0]]
        rows = np.unique(rows[self._member[rows]])
        if rows.size == 0:
            return
        self._member[rows] = False
        self._count -= int(rows.size)
        if self._approx is not None:
            if self._count < self.config.approx_threshold // 2:
                self._approx = None
                self._pending = {}
            else:
                in_graph = [r for r in rows.tolist() if self._pending.pop(r, 0) is not None]
                if in_graph:
                    self._approx.remove(np.asarray(in_graph, dtype=np.uint64))

    def clear(self) -> None:
        """Forget every member."""
        self._member[:] = False
        self._count = 0
        self._approx = None
        self._pending = {}

    def rebuild(self, rows: np.ndarray, matrix: np.ndarray) -> None:
        """Reset membership to exactly ``rows`` (used after rollback and load)."""
        self.clear()
        self.add(rows, matrix)

    def _build_approx(self, matrix: np.ndarray) -> None:
        from usearch.index import Index  # lazy: only large graphs need it

        c = self.config
        idx = Index(ndim=self.dim, metric="ip", dtype=c.dtype, connectivity=c.connectivity,
                    expansion_add=c.expansion_add, expansion_search=c.expansion_search)
        rows = self.members()
        if rows.size:
            idx.add(rows.astype(np.uint64), np.ascontiguousarray(matrix[rows]), threads=c.threads)
        self._approx = idx

    # -- search ------------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, matrix: np.ndarray, *, exact: bool = False,
               expansion: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-``k`` rows by cosine for each query.

        Parameters
        ----------
        queries : ndarray, shape (b, dim) or (dim,)
            L2-normalised query vectors.
        k : int
            Neighbours per query (fewer when the index is smaller).
        matrix : ndarray
            The embedding matrix the rows index into.
        exact : bool
            Force exact search even when the approximate index is active.
        expansion : int, optional
            HNSW search breadth for this call (default ``IndexConfig.expansion_search``).

        Returns
        -------
        list of (rows, similarities)
            One pair of arrays per query, best first.
        """
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.shape[1] != self.dim:
            raise ValueError(f"query dimension {q.shape[1]} != index dimension {self.dim}")
        k = min(int(k), self._count)
        if k <= 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(q))]
        if self._approx is not None and not exact:
            n_graph = len(self._approx)
            out = []
            if n_graph:
                ef = int(expansion or self.config.expansion_search)
                if self._approx.expansion_search != ef:
                    self._approx.expansion_search = ef
                # over-fetch from the (quantised) HNSW graph, then re-score exactly from the float32 matrix
                m = self._approx.search(q, min(2 * k + 8, n_graph), threads=1 if len(q) <= 16 else self.config.threads)
            if self._pending:
                prow = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
                psims = q @ matrix[prow].T  # (b, pending): exact over the small buffer
            for i in range(len(q)):
                keys = np.zeros(0, np.int64)
                sims = np.zeros(0, np.float32)
                if n_graph:
                    mi = m[i] if len(q) > 1 else m
                    keys = np.asarray(mi.keys, dtype=np.int64)
                    keys = keys[keys < len(self._member)]
                    keys = keys[self._member[keys]]
                    sims = (matrix[keys] @ q[i]).astype(np.float32)
                if self._pending:
                    keys = np.concatenate([keys, prow])
                    sims = np.concatenate([sims, psims[i].astype(np.float32)])
                order = np.lexsort((keys, -sims))[:k]
                out.append((keys[order], sims[order]))
            return out
        n = min(self._member.shape[0], matrix.shape[0])
        member = self._member[:n]
        scores = q @ matrix[:n].T  # (b, n): a view of the matrix, no copy
        scores[:, ~member] = -np.inf
        out = []
        for i in range(len(q)):
            s = scores[i]
            top = np.argpartition(-s, k - 1)[:k] if k < n else np.arange(n)
            top = top[member[top]]
            # deterministic order: score descending, then row id ascending
            order = np.lexsort((top, -s[top]))
            top = top[order]
            out.append((top.astype(np.int64), s[top].astype(np.float32)))
        return out
