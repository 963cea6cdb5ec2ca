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
ones), so writes stay cheap at 100k+ nodes while every member is always searchable. The buffer
keeps a contiguous copy of its vectors, so searching it is one matrix product.

A search answers all its queries at once: one HNSW batch call, one gather-and-rescore of the
candidates, one partition to each row's ``k`` best and one sort; ties are broken by row id in both
modes (a row whose ``k``-th best ties with a value left out is sorted whole).
"""

from __future__ import annotations

import numpy as np

from .config import IndexConfig

__all__ = ["VectorIndex"]

_QUERY_CHUNK = 1024  # queries scored per block in one search call
_THREADED_SEARCH = 4  # HNSW batch searches of at least this many queries use all threads


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
        # contiguous copy of the pending rows' vectors (a row's vector never changes while it is a
        # member), so a search does not gather them from the matrix again; rebuilt when rows leave
        self._pend_rows = np.zeros(0, dtype=np.int64)
        self._pend_vecs = np.zeros((0, self.dim), dtype=np.float32)
        self._pend_n = 0

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
            else:
                self._pend_append(fresh, matrix)
        elif self._count >= self.config.approx_threshold:
            self._build_approx(matrix)

    def flush(self, matrix: np.ndarray) -> None:
        """Insert the pending rows into the HNSW graph (no-op in exact mode)."""
        if self._approx is None or not self._pending:
            return
        rows = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
        self._pending = {}
        self._pend_n = 0
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
                self._pend_n = 0
            else:
                n_pend = len(self._pending)
                in_graph = [r for r in rows.tolist() if self._pending.pop(r, 0) is not None]
                if len(self._pending) != n_pend:  # pending rows left: rebuild their vector copy
                    keep = np.isin(self._pend_rows[: self._pend_n], rows, invert=True)
                    kept_rows = self._pend_rows[: self._pend_n][keep]
                    kept_vecs = self._pend_vecs[: self._pend_n][keep]
                    self._pend_n = int(kept_rows.size)
                    self._pend_rows[: self._pend_n] = kept_rows
                    self._pend_vecs[: self._pend_n] = kept_vecs
                if in_graph:
                    self._approx.remove(np.asarray(in_graph, dtype=np.uint64))

    def clear(self) -> None:
        """Forget every member."""
        self._member[:] = False
        self._count = 0
        self._approx = None
        self._pending = {}
        self._pend_n = 0

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
        self._pending = {}
        self._pend_n = 0

    def _pend_append(self, rows: np.ndarray, matrix: np.ndarray) -> None:
        """Copy the vectors of rows that just joined the pending buffer."""
        n, m = self._pend_n, int(rows.size)
        if n + m > self._pend_rows.shape[0]:
            cap = max(n + m, 2 * self._pend_rows.shape[0], 64)
            r = np.zeros(cap, dtype=np.int64)
            v = np.zeros((cap, self.dim), dtype=np.float32)
            r[:n], v[:n] = self._pend_rows[:n], self._pend_vecs[:n]
            self._pend_rows, self._pend_vecs = r, v
        self._pend_rows[n: n + m] = rows
        self._pend_vecs[n: n + m] = matrix[rows]
        self._pend_n = n + m

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
        if len(q) > _QUERY_CHUNK:  # bound the (queries x rows) score matrix
            return [hit for c in range(0, len(q), _QUERY_CHUNK)
                    for hit in self.search(q[c: c + _QUERY_CHUNK], k, matrix, exact=exact, expansion=expansion)]
        if self._approx is not None and not exact:
            return self._search_approx(q, k, matrix, expansion)
        n = min(self._member.shape[0], matrix.shape[0])
        member = self._member[:n]
        scores = q @ matrix[:n].T  # (b, n): a view of the matrix, no copy
        scores[:, ~member] = -np.inf
        return _top_k(np.broadcast_to(np.arange(n, dtype=np.int64), scores.shape), scores, k)

    def _search_approx(self, q: np.ndarray, k: int, matrix: np.ndarray, expansion: int | None
                       ) -> list[tuple[np.ndarray, np.ndarray]]:
        """HNSW candidates plus the exact pending buffer, re-scored and ranked for all queries at once."""
        b = len(q)
        n_graph = len(self._approx)
        key_parts, sim_parts = [], []
        if n_graph:
            ef = int(expansion or self.config.expansion_search)
            if self._approx.expansion_search != ef:
                self._approx.expansion_search = ef
            # over-fetch from the (quantised) HNSW graph, then re-score exactly from the float32 matrix
            m = self._approx.search(q, min(2 * k + 8, n_graph), threads=1 if b < _THREADED_SEARCH else self.config.threads)
            if hasattr(m, "counts"):
                keys = np.asarray(m.keys).astype(np.int64).reshape(b, -1)
                counts = np.asarray(m.counts, dtype=np.int64).reshape(b)
            else:  # a single query: one Matches object
                keys = np.asarray(m.keys).astype(np.int64).reshape(1, -1)
                counts = np.array([keys.shape[1]], dtype=np.int64)
            ok = np.arange(keys.shape[1])[None, :] < counts[:, None]
            ok &= (keys >= 0) & (keys < self._member.shape[0])
            keys = np.where(ok, keys, 0)
            ok &= self._member[keys]
            sims = np.einsum("bkd,bd->bk", matrix[keys], q, optimize=False).astype(np.float32)
            sims[~ok] = -np.inf
            key_parts.append(keys)
            sim_parts.append(sims)
        if self._pending:
            if self._pend_n != len(self._pending):  # the copy is out of step (cannot happen; be safe)
                self._pend_n = 0
                self._pend_append(np.fromiter(self._pending, dtype=np.int64, count=len(self._pending)), matrix)
            prow = self._pend_rows[: self._pend_n]
            key_parts.append(np.broadcast_to(prow, (b, prow.size)))
            sim_parts.append((q @ self._pend_vecs[: self._pend_n].T).astype(np.float32))  # exact, small buffer
        if not key_parts:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(b)]
        keys = np.concatenate(key_parts, axis=1) if len(key_parts) > 1 else key_parts[0]
        sims = np.concatenate(sim_parts, axis=1) if len(sim_parts) > 1 else sim_parts[0]
        return _top_k(keys, sims, k)


def _top_k(keys: np.ndarray, sims: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per row, the ``k`` best (key, similarity) pairs: similarity descending, then key ascending.

    ``keys`` and ``sims`` have shape (b, w); slots with similarity ``-inf`` are invalid and never
    returned. Rows are first cut to their ``k`` best with one partition; a row whose k-th best value
    ties with a value left out is sorted whole, so ties are always broken by key.
    """
    if sims.shape[1] > k:
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(sims, part, axis=1)
        clean = (sims >= top.min(axis=1)[:, None]).sum(axis=1) == k
        if clean.all():
            keys, sims = np.take_along_axis(keys, part, axis=1), top
        elif clean.any():  # sort the tied rows whole, the others within their k best
            out = _top_k(np.take_along_axis(keys[clean], part[clean], axis=1), top[clean], k)
            rest = iter(_top_k(keys[~clean], sims[~clean], k + sims.shape[1]))  # width <= k: no cut
            first = iter(out)
            return [next(first) if c else _cut(next(rest), k) for c in clean.tolist()]
    order = np.lexsort((keys, -sims), axis=1)[:, :k]
    keys = np.take_along_axis(keys, order, axis=1)
    sims = np.take_along_axis(sims, order, axis=1).astype(np.float32, copy=False)
    n_ok = np.isfinite(sims).sum(axis=1).tolist()
    return [(keys[i, : n_ok[i]].astype(np.int64), sims[i, : n_ok[i]].copy()) for i in range(len(keys))]


def _cut(pair: tuple[np.ndarray, np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    return pair[0][:k], pair[1][:k]
