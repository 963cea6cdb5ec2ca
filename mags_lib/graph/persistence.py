"""Save and load a :class:`~mags_lib.graph.LiquidGraph` as a versioned directory.

Layout of a saved graph (format ``mags-liquid-graph``, version 2)::

    <path>/
      manifest.json      format name + version, embedder, config, counts, sha256 + size of every
                         file, and a checksum of the manifest itself
      graph.json         texts, node metadata, edge provenance and validity times, relation labels, clock
      oplog.jsonl        the operation log, one JSON object per line
      arrays/*.npy       numeric columns (nodes_*.npy, edges_*.npy), emb.npy, rel_emb.npy
      base/              only when the log was folded (``LimitsConfig.max_oplog_ops``): the state the
                         log starts from (``base/graph.json``, ``base/arrays/*.npy``), so that
                         ``LiquidGraph.replay(g.oplog, ..., base=g.oplog_base)`` rebuilds the graph

Writes are crash-safe (:mod:`.atomic`): everything goes to a temporary sibling directory, every
file is fsynced, the directory is sealed and swapped in by renames; a crash at any point leaves the
previous save or the new one, and :func:`load_graph` finishes or undoes an interrupted swap.

Loading checks, in this order, and raises :class:`~mags_lib.graph.model.GraphFormatError` naming
the file and the field: the manifest's format, version and checksum (a hand edit of the manifest
-- say ``resolve_threshold`` -- is refused: pass ``config=`` to :func:`load_graph` instead), the
manifest's fields, every file's size and sha256, the structure of ``graph.json`` and of every log
entry, the arrays' dtypes, shapes and id ranges. Nothing on disk is modified by a load except to
complete an interrupted save. Version 1 saves (no manifest checksum, no base) still load, and so do
saves made before a column of :data:`~.store.ADDED_COLUMNS` existed (it takes its default; a missing
``uid`` column and ``next_uid`` count mean a graph never compacted: ids are row numbers), and
saves without the edges' validity times (``valid_from_time`` / ``valid_to_time``, added within version 2
and ignored by older readers): their intervals are in ticks only.

In-memory snapshots (:meth:`LiquidGraph.snapshot`) are not part of a save (how many were taken is, so their ids
go on after a load); the operation log is.
:func:`graph_to_files` / :func:`graph_from_files` are the encoder and decoder on their own (a
``{relative path: bytes}`` mapping), used by the save and the load and by tests.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from . import atomic
from .config import GraphConfig
from .model import GraphFormatError
from .store import ADDED_COLUMNS, EDGE_ARRAYS, EDGE_LISTS, EDGE_TIME_LISTS, NODE_ARRAYS, NODE_LISTS

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "graph_from_files", "graph_to_files", "load_graph", "read_manifest",
           "save_graph"]

FORMAT_NAME = "mags-liquid-graph"
FORMAT_VERSION = 2
_EP_ID = re.compile(r"ep(\d+)")


def _is_save(p: Path) -> bool:
    return (p / "manifest.json").is_file()


def _npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` as a .npy file (format 1.0, the header ``np.save`` writes, built without its overhead)."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.hasobject or arr.ndim > 2:
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        return buf.getvalue()
    header = f"{{'descr': '{arr.dtype.str}', 'fortran_order': False, 'shape': {tuple(arr.shape)!r}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1") + arr.tobytes()


def _json_bytes(doc) -> bytes:
    return json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8")


def _state_files(st: dict, prefix: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for part, spec in (("nodes", NODE_ARRAYS), ("edges", EDGE_ARRAYS)):
        for col in spec:
            out[f"{prefix}arrays/{part}_{col}.npy"] = _npy_bytes(st[part]["arrays"][col])
    out[f"{prefix}arrays/emb.npy"] = _npy_bytes(np.asarray(st["emb"], dtype=np.float32))
    out[f"{prefix}arrays/rel_emb.npy"] = _npy_bytes(np.asarray(st["rel_emb"], dtype=np.float32))
    body = {
        "nodes": {"n": st["nodes"]["n"], "next_uid": st["nodes"]["next_uid"], **st["nodes"]["lists"]},
        "edges": {"n": st["edges"]["n"], "next_uid": st["edges"]["next_uid"], **st["edges"]["lists"]},
        "rel_text": st["rel_text"],
        "coact": st["coact"],
        "tick": st["tick"],
    }
    out[f"{prefix}graph.json"] = _json_bytes(body)
    return out


def graph_to_files(g) -> dict[str, bytes]:
    """Every file of a save of ``g``, as ``{relative path: bytes}`` (the manifest last).

    Everything is encoded before anything is written, so a value that cannot be saved fails
    here and leaves the previous save untouched.
    """
    files = _state_files(g._state(share=True), "")
    files["oplog.jsonl"] = "".join(
        json.dumps(op, ensure_ascii=False, allow_nan=False) + "\n" for op in g.oplog).encode("utf-8")
    if g.oplog_base is not None:
        files.update(_state_files(g.oplog_base, "base/"))
    manifest = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "embedder": {"name": getattr(g.embedder, "name", type(g.embedder).__name__), "dim": g.dim},
        "config": g.config.to_dict(),
        "seed": g.seed,
        "counts": {"nodes": g.nodes.n, "edges": g.edges.n, "relations": len(g._rel_text), "ops": len(g.oplog)},
        "stats": g.stats(),
        "base": g.oplog_base is not None,
        # snapshots stay in memory, but their ids go on after a load: an id written down (a consolidation
        # record) never names a later session's snapshot
        "snapshots_taken": g._snap_counter,
        "files": {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                  for name, data in files.items()},
    }
    manifest["checksum"] = atomic.json_checksum(manifest)
    # one entry a line (readable, and the C encoder: ``indent`` would switch to the slow Python one)
    files["manifest.json"] = json.dumps(manifest, ensure_ascii=False, separators=(",\n", ": ")).encode("utf-8")
    return files


def save_graph(g, path) -> Path:
    """Save ``g`` crash-safely to directory ``path`` (replacing a previous save there).

    Parameters
    ----------
    g : LiquidGraph
    path : str or Path
        Target directory. If it exists it must be an earlier save (or empty): a directory with
        other content is never overwritten.

    Returns
    -------
    Path
        The saved directory.
    """
    files = graph_to_files(g)

    def fill(tmp: Path) -> None:
        for name, data in files.items():
            atomic.write_file(tmp / name, data, tmp)

    return atomic.save_dir(path, fill, is_save=_is_save, what="saved graph")


class _DirFiles(Mapping):
    """The files of a save folder as a read-only mapping (read on access)."""

    def __init__(self, root: Path):
        self.root = root

    def __getitem__(self, name: str) -> bytes:
        p = self.root / name
        if not p.is_file():
            raise KeyError(name)
        return p.read_bytes()

    def __iter__(self):
        return (p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file())

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _root(path) -> Path:
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise GraphFormatError(f"{path} is a file, not a saved graph directory (LiquidGraph.save writes a "
                               "directory with manifest.json)")
    root = atomic.recover(path, is_save=_is_save)
    if root is None:
        raise FileNotFoundError(f"no saved graph at {path}")
    return root


def read_manifest(path) -> dict:
    """Read and check the manifest of a saved graph (format, version, checksum, fields)."""
    root = _root(path)
    return _manifest(_DirFiles(root), str(path))


def _fail(where: str, msg: str) -> GraphFormatError:
    return GraphFormatError(f"{where}: {msg}")


def _manifest(files: Mapping, where: str) -> dict:
    mname = f"{where}/manifest.json"
    try:
        raw = files["manifest.json"]
    except KeyError:
        raise GraphFormatError(f"{where} has no manifest.json: not a saved LiquidGraph (or the save was "
                               "interrupted)") from None
    manifest = atomic.read_manifest_json(
        raw, mname, fmt=FORMAT_NAME, version=FORMAT_VERSION, error=GraphFormatError,
        what="LiquidGraph save", hint="To load with other settings, pass config= to LiquidGraph.load instead of editing the manifest")
    for key in ("files", "embedder", "config"):
        if key not in manifest:
            raise _fail(mname, f"lacks the field {key!r}: corrupt manifest")
    emb = manifest["embedder"]
    if not isinstance(emb, dict) or "dim" not in emb:
        raise _fail(mname, f"field 'embedder' must be an object with 'name' and 'dim', got {emb!r:.60}")
    if isinstance(emb["dim"], bool) or not isinstance(emb["dim"], int) or emb["dim"] < 1:
        raise _fail(mname, f"field 'embedder.dim' must be a positive integer, got {emb['dim']!r}")
    if not isinstance(manifest["config"], dict):
        raise _fail(mname, "field 'config' must be an object of GraphConfig parts")
    info = manifest["files"]
    if not isinstance(info, dict):
        raise _fail(mname, "field 'files' must be an object {name: {sha256, bytes}}")
    for name, f in info.items():
        if not isinstance(f, dict) or not isinstance(f.get("sha256"), str):
            raise _fail(mname, f"field 'files.{name}' must hold 'sha256' and 'bytes'")
        if isinstance(f.get("bytes"), bool) or not isinstance(f.get("bytes"), int) or f["bytes"] < 0:
            raise _fail(mname, f"field 'files.{name}.bytes' must be a non-negative integer, got {f.get('bytes')!r}")
    seed = manifest.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _fail(mname, f"field 'seed' must be an integer or null, got {seed!r}")
    if not isinstance(manifest.get("base", False), bool):
        raise _fail(mname, "field 'base' must be true or false")
    taken = manifest.get("snapshots_taken", 0)
    if isinstance(taken, bool) or not isinstance(taken, int) or taken < 0:
        raise _fail(mname, f"field 'snapshots_taken' must be a non-negative integer, got {taken!r}")
    return manifest


def _read_checked(files: Mapping, name: str, manifest: dict, where: str) -> bytes:
    info = manifest["files"].get(name)
    if info is None:
        raise _fail(where, f"manifest.json does not list {name}: corrupt or foreign save")
    try:
        data = files[name]
    except KeyError:
        raise _fail(where, f"file {name} is missing (truncated save)") from None
    if len(data) != info["bytes"]:
        raise _fail(where, f"{name} has {len(data)} bytes, manifest.json says {info['bytes']} (truncated file or edited manifest)")
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise _fail(where, f"{name} fails its sha256 check against manifest.json (corrupt file or edited manifest)")
    return data


_NPY_HEADER = re.compile(rb"\{'descr': '([<>|][a-z]\d+)', 'fortran_order': False, 'shape': \((\d+),(?: (\d+))?\), \} *\n")


def _npy(data: bytes, name: str, where: str) -> np.ndarray:
    """Decode a .npy file; the headers ``np.save`` writes for our arrays are read directly (numpy's own
    reader parses every header with ``ast.literal_eval``, 10x slower on small arrays), anything else
    goes through ``np.load``. The result is read-only (the loader copies what it keeps)."""
    if data[:8] == b"\x93NUMPY\x01\x00" and len(data) >= 10:
        hlen = int.from_bytes(data[8:10], "little")
        m = _NPY_HEADER.fullmatch(data, 10, 10 + hlen)
        if m is not None:
            shape = tuple(int(x) for x in m.groups()[1:] if x is not None)
            dtype = np.dtype(m.group(1).decode("ascii"))
            if len(data) - 10 - hlen == dtype.itemsize * int(np.prod(shape)):
                return np.frombuffer(data, dtype=dtype, offset=10 + hlen).reshape(shape)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # numpy raises several types for a bad header
        raise _fail(where, f"{name} is not a readable .npy array ({exc})") from exc


def _is_str_list(x) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) for v in x)


def _check_body(body, fname: str, dim: int) -> None:
    """Structure of a graph.json document; GraphFormatError naming the field otherwise."""
    def bad(field: str, what: str):
        return GraphFormatError(f"{fname}: field {field!r} {what}")

    if not isinstance(body, dict):
        raise GraphFormatError(f"{fname} must hold a JSON object, got {type(body).__name__}")
    for part, lists in (("nodes", NODE_LISTS), ("edges", EDGE_LISTS)):
        d = body.get(part)
        if not isinstance(d, dict):
            raise bad(part, "must be an object")
        n = d.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise bad(f"{part}.n", f"must be a non-negative integer, got {n!r}")
        nu = d.setdefault("next_uid", n)  # saved before compaction existed: ids are rows
        if isinstance(nu, bool) or not isinstance(nu, int) or nu < n:
            raise bad(f"{part}.next_uid", f"must be an integer >= {part}.n, got {nu!r}")
        for col in lists:
            v = d.get(col)
            if col not in d and part == "edges" and col in EDGE_TIME_LISTS:
                continue  # saved before validity intervals in time: filled with None on load
            if not isinstance(v, list) or len(v) != n:
                raise bad(f"{part}.{col}", f"must be a list of {n} entries")
    nodes = body["nodes"]
    if not _is_str_list(nodes["text"]):
        raise bad("nodes.text", "must be a list of strings")
    for i, m in enumerate(nodes["meta"]):
        if not (isinstance(m, dict) and _is_str_list(m.get("keys")) and _is_str_list(m.get("aliases"))
                and isinstance(m.get("source"), (str, type(None))) and isinstance(m.get("time"), (str, type(None)))
                and _is_str_list(m.get("merged", []))):
            raise bad(f"nodes.meta[{i}]", "must be an object with 'keys' and 'aliases' (lists of strings), "
                      "'source' and 'time' (strings or null)")
    n_nodes, node_ids = nodes["n"], nodes["next_uid"]
    for col in EDGE_LISTS:
        if col in EDGE_TIME_LISTS:
            for e, v in enumerate(body["edges"].get(col, ())):
                if not isinstance(v, (str, type(None))):
                    raise bad(f"edges.{col}[{e}]", f"must be a time string or null, got {v!r:.40}")
            continue
        for e, v in enumerate(body["edges"][col]):
            if not _is_str_list(v):
                raise bad(f"edges.{col}[{e}]", "must be a list of strings")
    for e, eps in enumerate(body["edges"]["episodes"]):
        for x in eps:
            m = _EP_ID.fullmatch(x)
            if m is None or int(m.group(1)) >= node_ids:
                raise bad(f"edges.episodes[{e}]", f"holds {x!r}, not an episode id of this graph")
    if not _is_str_list(body.get("rel_text")):
        raise bad("rel_text", "must be a list of strings")
    coact = body.get("coact")
    if not isinstance(coact, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                       and 0 <= x < n_nodes for x in p) for p in coact):
        raise bad("coact", "must be a list of [node, node] pairs of this graph")
    tick = body.get("tick")
    if isinstance(tick, bool) or not isinstance(tick, int) or tick < 0:
        raise bad("tick", f"must be a non-negative integer, got {tick!r}")


def _state_from_files(files: Mapping, manifest: dict, prefix: str, where: str, dim: int) -> dict:
    gname = f"{prefix}graph.json"
    try:
        body = json.loads(_read_checked(files, gname, manifest, where).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(where, f"{gname} is not valid JSON ({exc})") from exc
    _check_body(body, f"{where}/{gname}", dim)
    st = {"nodes": {"n": body["nodes"]["n"], "next_uid": body["nodes"]["next_uid"], "arrays": {}, "lists": {}},
          "edges": {"n": body["edges"]["n"], "next_uid": body["edges"]["next_uid"], "arrays": {}, "lists": {}}}
    for part, spec, lists in (("nodes", NODE_ARRAYS, NODE_LISTS), ("edges", EDGE_ARRAYS, EDGE_LISTS)):
        n = st[part]["n"]
        for col, (dtype, default) in spec.items():
            fname = f"{prefix}arrays/{part}_{col}.npy"
            if fname not in manifest["files"] and col in ADDED_COLUMNS.get(part, ()):
                # saved before the column existed (ids then were the row numbers)
                st[part]["arrays"][col] = np.arange(n, dtype=dtype) if col == "uid" else np.full(n, default, dtype=dtype)
                continue
            arr = _npy(_read_checked(files, fname, manifest, where), fname, where)
            if arr.dtype != np.dtype(dtype) or arr.shape != (n,):
                raise _fail(where, f"{fname} has dtype {arr.dtype} and shape {arr.shape}, expected "
                            f"{np.dtype(dtype)} and ({n},)")
            st[part]["arrays"][col] = arr
        for col in lists:
            st[part]["lists"][col] = body[part][col] if col in body[part] else [None] * n
    n_nodes, n_rel = st["nodes"]["n"], len(body["rel_text"])
    ea, na = st["edges"]["arrays"], st["nodes"]["arrays"]
    for col, hi in (("src", n_nodes), ("dst", n_nodes), ("rel", n_rel)):
        a = ea[col]
        if a.size and (a.min() < 0 or a.max() >= hi):
            raise _fail(where, f"{prefix}arrays/edges_{col}.npy holds ids outside 0..{hi - 1}")
    for part, a, hi in (("nodes", na["kind"], 1), ("edges", ea["kind"], 2)):
        if a.size and (a.min() < 0 or a.max() > hi):
            raise _fail(where, f"{prefix}arrays/{part}_kind.npy holds unknown {part[:-1]} kinds")
    for part in ("nodes", "edges"):
        u, nu = st[part]["arrays"]["uid"], st[part]["next_uid"]
        if u.size and (u[0] < 0 or u[-1] >= nu or (np.diff(u) <= 0).any()):
            raise _fail(where, f"{prefix}arrays/{part}_uid.npy must hold increasing ids from 0 to {part}.next_uid - 1")
    for name, rows in (("emb", n_nodes), ("rel_emb", n_rel)):
        fname = f"{prefix}arrays/{name}.npy"
        arr = _npy(_read_checked(files, fname, manifest, where), fname, where)
        if arr.dtype != np.float32 or arr.shape != (rows, dim):
            raise _fail(where, f"{fname} has dtype {arr.dtype} and shape {arr.shape}, expected float32 ({rows}, {dim})")
        st[name] = arr
    st["rel_text"] = body["rel_text"]
    st["coact"] = body["coact"]
    st["tick"] = body["tick"]
    return st


def graph_from_files(files: Mapping, embedder, config: GraphConfig | None = None, *, where: str = "(in memory)"):
    """Decode the files of a save (``{relative path: bytes}``, see :func:`graph_to_files`) into a graph.

    Raises
    ------
    GraphFormatError
        Corrupt, truncated, hand-edited, foreign or newer-version save (the message names the file
        and the field).
    ValueError
        Embedder dimension differs from the saved one.
    """
    from .core import LiquidGraph, check_op

    manifest = _manifest(files, where)
    dim = int(manifest["embedder"]["dim"])
    if int(embedder.dim) != dim:
        raise ValueError(f"the graph at {where} was saved with {dim}-d embeddings "
                         f"({manifest['embedder'].get('name')}); the embedder given has dim {embedder.dim}")
    name = getattr(embedder, "name", None)
    if name is not None and name != manifest["embedder"].get("name"):
        warnings.warn(f"graph saved with embedder {manifest['embedder'].get('name')!r}, loading with {name!r}: "
                      "similarities between old and new texts may be meaningless", stacklevel=3)
    if config is None:
        try:
            config = GraphConfig.from_dict(manifest["config"])
        except (TypeError, ValueError) as exc:
            raise _fail(f"{where}/manifest.json", f"field 'config' is invalid: {exc}") from exc
    st = _state_from_files(files, manifest, "", where, dim)
    try:
        log_text = _read_checked(files, "oplog.jsonl", manifest, where).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(where, f"oplog.jsonl is not UTF-8 text ({exc})") from exc
    oplog = []
    # "\n" only: splitlines() also splits on U+2028 / U+2029 / U+0085, which the writer's ensure_ascii=False leaves
    # raw inside an observed text's string
    for i, line in enumerate(log_text.split("\n")):
        if not line.strip():
            continue
        try:
            op = json.loads(line)
            check_op(op)
        except ValueError as exc:  # JSONDecodeError is a ValueError
            raise _fail(f"{where}/oplog.jsonl", f"line {i + 1}: {exc}") from exc
        oplog.append(op)
    st["oplog_len"] = len(oplog)
    base = _state_from_files(files, manifest, "base/", where, dim) if manifest.get("base") else None
    g = LiquidGraph(embedder, config=config, seed=manifest.get("seed"))
    try:
        g._load_state(st, oplog=oplog, shared=True)  # everything decoded here is fresh: no copy needed
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise _fail(where, f"inconsistent saved state ({exc})") from exc
    g.oplog_base = base
    g._snap_counter = manifest.get("snapshots_taken", 0)
    return g


def load_graph(path, embedder, config: GraphConfig | None = None):
    """Load a graph written by :func:`save_graph` (finishing an interrupted save first).

    Parameters
    ----------
    path : str or Path
    embedder : Embedder
        Must have the saved embedding dimension (and should be the same model).
    config : GraphConfig, optional
        Overrides the saved config.

    Returns
    -------
    LiquidGraph

    Raises
    ------
    FileNotFoundError
        Nothing at ``path`` (nor a save interrupted there).
    GraphFormatError
        Corrupt, truncated, hand-edited, foreign or newer-version save.
    ValueError
        Embedder dimension differs from the saved one.
    """
    root = _root(path)
    return graph_from_files(_DirFiles(root), embedder, config=config, where=str(path))
