"""Column stores for nodes and edges: numpy arrays (numbers) plus Python lists (text, provenance).

Ids and rows: every row carries a ``uid`` (the node or edge id the rest of the world sees: ``n12``,
``ep3``, edge ``57``), handed out in increasing order and never reused, so ids stay stable through
pruning, compaction, snapshots, rollback, save/load and operation-log replay. Removed rows are marked
``alive = False`` and stay until :meth:`ColumnStore.compact` drops them; until a store's first
compaction a row's uid equals its row number. ``uid`` increases with the row, so a uid is found by
binary search (:meth:`ColumnStore.rows`).

The cells of the list columns (a node's ``meta`` dict, an edge's ``episodes`` / ``sources``) are
*replaced*, never mutated in place, once the row exists: snapshots and checkpoints share them
(``state(deep=False)``), so an in-place change would rewrite the past.
"""

from __future__ import annotations

import copy

import numpy as np

__all__ = [
    "ADDED_COLUMNS",
    "EDGE_ARRAYS",
    "EDGE_ASSOC",
    "EDGE_FACT",
    "EDGE_LISTS",
    "EDGE_MENTION",
    "EDGE_TIME_LISTS",
    "KIND_ENTITY",
    "KIND_EPISODE",
    "NODE_ARRAYS",
    "NODE_LISTS",
    "STAGE_LONG",
    "STAGE_WORKING",
    "ColumnStore",
]

KIND_ENTITY, KIND_EPISODE = 0, 1  # node kinds: semantic block, episodic block
STAGE_WORKING, STAGE_LONG = 0, 1  # working memory, long-term memory
EDGE_FACT, EDGE_ASSOC, EDGE_MENTION = 0, 1, 2  # fact (triplet), association, episode -> entity

NODE_ARRAYS: dict[str, tuple[type, object]] = {
    "uid": (np.int64, -1),  # the node's id (``n<uid>`` / ``ep<uid>``), increasing with the row
    "alive": (np.bool_, False),
    "kind": (np.int8, KIND_ENTITY),
    "stage": (np.int8, STAGE_WORKING),
    "importance": (np.float64, 0.0),
    "surprise": (np.float64, 0.0),
    "confidence": (np.float64, 1.0),
    "created": (np.int64, 0),
    "last_access": (np.int64, 0),
    "access": (np.int64, 0),
    "permanent": (np.bool_, False),
    "cluster": (np.int64, -1),  # SCC cluster: the uid of its smallest member (-1: none)
}
NODE_LISTS = ("text", "meta")  # meta: {"aliases": [...], "source": str|None, "time": str|None}

EDGE_ARRAYS: dict[str, tuple[type, object]] = {
    "uid": (np.int64, -1),  # the edge's id, increasing with the row
    "src": (np.int64, -1),  # node row
    "dst": (np.int64, -1),
    "rel": (np.int64, -1),
    "kind": (np.int8, EDGE_FACT),
    "strength": (np.float64, 0.0),
    "confidence": (np.float64, 1.0),
    "created": (np.int64, 0),
    "last_used": (np.int64, 0),
    "uses": (np.int64, 0),
    "alive": (np.bool_, False),
    "valid": (np.bool_, True),
    "valid_from": (np.int64, 0),
    "valid_to": (np.int64, -1),
    "invalidated_by": (np.int64, -1),  # id (uid) of the edge that superseded this one (-1: none)
    "permanent": (np.bool_, False),
    "activation": (np.float64, 0.0),
    "provenance_dropped": (np.int64, 0),  # restatements whose ids left the bounded provenance lists
}
EDGE_LISTS = ("episodes", "sources", "valid_from_time", "valid_to_time")
"""Per edge: list of episode node ids, list of source ids, and the validity interval in real time: the
time (ISO string as the observation gave it, or None) the fact was first said and the time the
observation that superseded it was said (None while valid, or when no time was given). Saves older
than these two columns load with None (the interval then falls back to ticks)."""
EDGE_TIME_LISTS = ("valid_from_time", "valid_to_time")  # the str|None columns of EDGE_LISTS
ADDED_COLUMNS = {"nodes": ("uid",), "edges": ("provenance_dropped", "uid")}
"""Columns added after save format 2 shipped: a save without them loads with their default (``uid``:
the row numbers, as in a store never compacted)."""


class ColumnStore:
    """Growable set of equally long columns.

    Parameters
    ----------
    arrays : dict
        Column name -> (dtype, default value).
    lists : tuple of str
        Names of Python-list columns.
    """

    def __init__(self, arrays: dict[str, tuple[type, object]], lists: tuple[str, ...], capacity: int = 64):
        self._spec = arrays
        self._list_names = lists
        self.n = 0
        self.next_uid = 0  # the uid the next row gets (uids are never reused, even after a compaction)
        self._cap = max(int(capacity), 1)
        self._a = {k: np.full(self._cap, d, dtype=t) for k, (t, d) in arrays.items()}
        self._l: dict[str, list] = {k: [] for k in lists}

    def __getattr__(self, name: str):
        a = self.__dict__.get("_a")
        if a is not None and name in a:
            return a[name][: self.n]
        lst = self.__dict__.get("_l")
        if lst is not None and name in lst:
            return lst[name]
        raise AttributeError(name)

    def reserve(self, n: int) -> None:
        """Make room for ``n`` rows in total."""
        if n <= self._cap:
            return
        cap = max(n, 2 * self._cap)
        for k, (t, d) in self._spec.items():
            new = np.full(cap, d, dtype=t)
            new[: self.n] = self._a[k][: self.n]
            self._a[k] = new
        self._cap = cap

    def append(self, lists: dict, **values) -> int:
        """Add one row; returns its id."""
        i = self.n
        if i >= self._cap:
            self.reserve(i + 1)
        a = self._a
        for k, v in values.items():
            a[k][i] = v
        if "uid" in a:
            a["uid"][i] = self.next_uid
            self.next_uid += 1
        for k in self._list_names:
            self._l[k].append(lists[k])
        self.n = i + 1
        return i

    def extend(self, count: int, lists: dict, **values) -> np.ndarray:
        """Add ``count`` rows at once (values are scalars or arrays of length ``count``)."""
        start = self.n
        self.reserve(start + count)
        for k, v in values.items():
            self._a[k][start: start + count] = v
        if "uid" in self._a:
            self._a["uid"][start: start + count] = np.arange(self.next_uid, self.next_uid + count)
            self.next_uid += count
        for k in self._list_names:
            self._l[k].extend(lists[k])
        self.n = start + count
        return np.arange(start, start + count)

    def rows(self, uids) -> np.ndarray:
        """Row of each uid in ``uids`` (-1 where no row holds it: never given, or compacted away)."""
        u = np.asarray(uids, dtype=np.int64)
        if self.n == self.next_uid:  # never compacted: uid = row
            return np.where((u >= 0) & (u < self.n), u, -1)
        have = self._a["uid"][: self.n]
        r = np.searchsorted(have, u)
        found = (r < self.n) & (have[np.minimum(r, max(self.n - 1, 0))] == u) if self.n else np.zeros(u.shape, bool)
        return np.where(found, r, -1)

    def row(self, uid: int) -> int:
        """Row of one uid (-1 if no row holds it)."""
        if self.n == self.next_uid:
            return int(uid) if 0 <= uid < self.n else -1
        return int(self.rows([uid])[0])

    def compact(self, keep: np.ndarray) -> None:
        """Keep only rows ``keep`` (increasing row numbers), renumbered ``0..len(keep)-1`` in order.

        The uids move with their rows (``next_uid`` is unchanged); list cells are moved, not copied.
        """
        keep = np.asarray(keep, dtype=np.int64)
        m = int(keep.size)
        cap = max(m, 64)
        for k, (t, d) in self._spec.items():
            new = np.full(cap, d, dtype=t)
            new[:m] = self._a[k][keep]
            self._a[k] = new
        kl = keep.tolist()
        self._l = {k: [v[i] for i in kl] for k, v in self._l.items()}
        self._cap, self.n = cap, m

    def state(self, deep: bool = True) -> dict:
        """Copy of the used rows: {"arrays": {...}, "lists": {...}, "n": int}.

        The arrays are always copied; the list cells are deep-copied, or shared with ``deep=False``.
        """
        return {
            "n": self.n,
            "next_uid": self.next_uid,
            "arrays": {k: v[: self.n].copy() for k, v in self._a.items()},
            "lists": {k: copy.deepcopy(v) if deep else list(v) for k, v in self._l.items()},
        }

    def load_state(self, state: dict, deep: bool = True) -> None:
        """Replace the contents by a :meth:`state` (arrays copied; list cells copied unless ``deep=False``).

        A state without ``uid`` (made before the column existed) gets the row numbers, and without
        ``next_uid`` the number of rows."""
        n = int(state["n"])
        missing = set(self._spec) - set(state["arrays"]) - {"uid"}
        if missing:
            raise ValueError(f"state lacks columns {sorted(missing)}")
        uid = np.asarray(state["arrays"]["uid"]) if "uid" in state["arrays"] else np.arange(n, dtype=np.int64)
        next_uid = int(state.get("next_uid", n))
        if "uid" in self._spec and n and (uid.shape != (n,) or uid[0] < 0 or (np.diff(uid) <= 0).any()
                                          or uid[-1] >= next_uid):
            raise ValueError(f"uids must increase from >= 0 and stay below next_uid={next_uid}")
        self.n = 0
        self._cap = max(n, 64)
        self._a = {}
        for k, (t, d) in self._spec.items():
            arr = np.full(self._cap, d, dtype=t)
            src = uid if k == "uid" else np.asarray(state["arrays"][k])
            if src.shape != (n,):
                raise ValueError(f"column {k!r} has shape {src.shape}, expected ({n},)")
            arr[:n] = src
            self._a[k] = arr
        self._l = {k: copy.deepcopy(list(state["lists"][k])) if deep else list(state["lists"][k])
                   for k in self._list_names}
        for k, v in self._l.items():
            if len(v) != n:
                raise ValueError(f"list column {k!r} has {len(v)} rows, expected {n}")
        self.n = n
        self.next_uid = next_uid if "uid" in self._spec else n
