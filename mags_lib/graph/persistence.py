"""Save and load a :class:`~mags_lib.graph.LiquidGraph` as a versioned directory.

Layout of a saved graph (format ``mags-liquid-graph``, version 1)::

    <path>/
      manifest.json      format name + version, embedder, config, counts, sha256 + size of every file
      graph.json         texts, node metadata, edge provenance, relation labels, clock
      oplog.jsonl        the operation log, one JSON object per line
      arrays/*.npy       numeric columns (nodes_*.npy, edges_*.npy), emb.npy, rel_emb.npy

Writes are atomic: everything goes to a temporary sibling directory, every file is fsynced, the
manifest is written last, then the directory replaces the old one by rename. A crash at any point
leaves the previous save readable. Loading checks the format name, the version, every file's size
and sha256 and the arrays' shapes, and raises :class:`~mags_lib.graph.model.GraphFormatError`
saying what is wrong; nothing is modified on a failed load.

In-memory snapshots (:meth:`LiquidGraph.snapshot`) are not part of a save; the operation log is,
so :meth:`LiquidGraph.replay` can rebuild the saved graph from ``oplog.jsonl`` alone (with the same
embedder and config).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import uuid
import warnings
from pathlib import Path

import numpy as np

from .config import GraphConfig
from .model import GraphFormatError
from .store import EDGE_ARRAYS, NODE_ARRAYS

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "load_graph", "read_manifest", "save_graph"]

FORMAT_NAME = "mags-liquid-graph"
FORMAT_VERSION = 1


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write(path: Path, data: bytes, files: dict, root: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    files[path.relative_to(root).as_posix()] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def save_graph(g, path) -> Path:
    """Save ``g`` atomically to directory ``path`` (replacing a previous save there).

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
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise FileExistsError(f"{path} exists and is not a directory; choose another path")
        if any(path.iterdir()) and not (path / "manifest.json").exists():
            raise FileExistsError(f"{path} is a non-empty directory that is not a saved graph; refusing to "
                                  "overwrite it (choose a new or empty path)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    st = g._state()
    files: dict[str, dict] = {}
    try:
        tmp.mkdir()
        for part, spec in (("nodes", NODE_ARRAYS), ("edges", EDGE_ARRAYS)):
            for col in spec:
                _write(tmp / "arrays" / f"{part}_{col}.npy", _npy_bytes(st[part]["arrays"][col]), files, tmp)
        _write(tmp / "arrays" / "emb.npy", _npy_bytes(st["emb"]), files, tmp)
        _write(tmp / "arrays" / "rel_emb.npy", _npy_bytes(st["rel_emb"]), files, tmp)
        body = {
            "nodes": {"n": st["nodes"]["n"], **st["nodes"]["lists"]},
            "edges": {"n": st["edges"]["n"], **st["edges"]["lists"]},
            "rel_text": st["rel_text"],
            "coact": st["coact"],
            "tick": st["tick"],
        }
        _write(tmp / "graph.json", json.dumps(body, ensure_ascii=False).encode(), files, tmp)
        log = "".join(json.dumps(op, ensure_ascii=False) + "\n" for op in g.oplog)
        _write(tmp / "oplog.jsonl", log.encode(), files, tmp)
        manifest = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "embedder": {"name": getattr(g.embedder, "name", type(g.embedder).__name__), "dim": g.dim},
            "config": g.config.to_dict(),
            "seed": g.seed,
            "counts": {"nodes": st["nodes"]["n"], "edges": st["edges"]["n"], "relations": len(st["rel_text"]),
                       "ops": len(g.oplog)},
            "stats": g.stats(),
            "files": files,
        }
        data = json.dumps(manifest, indent=1, ensure_ascii=False).encode()
        with open(tmp / "manifest.json", "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp / "arrays")
        _fsync_dir(tmp)
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(path, old)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_manifest(path) -> dict:
    """Read and check the manifest of a saved graph (format, version, listed files present)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no saved graph at {path}")
    if not path.is_dir():
        raise GraphFormatError(f"{path} is a file, not a saved graph directory (LiquidGraph.save writes a "
                               "directory with manifest.json)")
    mpath = path / "manifest.json"
    if not mpath.exists():
        raise GraphFormatError(f"{path} has no manifest.json: not a saved LiquidGraph (or the save was interrupted)")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GraphFormatError(f"{mpath} is corrupt or truncated ({exc}); restore it from a backup") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        fmt = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise GraphFormatError(f"{path} holds format {fmt!r}, not {FORMAT_NAME!r}: not a LiquidGraph save")
    ver = manifest.get("version")
    if not isinstance(ver, int) or ver > FORMAT_VERSION or ver < 1:
        raise GraphFormatError(f"{path} has format version {ver!r}; this mags_lib reads versions 1..{FORMAT_VERSION}"
                               " (upgrade mags_lib to read newer saves)")
    for key in ("files", "embedder", "config"):
        if key not in manifest:
            raise GraphFormatError(f"{mpath} lacks the {key!r} entry: corrupt manifest")
    return manifest


def _read_checked(root: Path, name: str, manifest: dict) -> bytes:
    info = manifest["files"].get(name)
    if info is None:
        raise GraphFormatError(f"{root}: manifest does not list {name}: corrupt or foreign save")
    p = root / name
    if not p.exists():
        raise GraphFormatError(f"{root}: file {name} is missing (truncated save)")
    data = p.read_bytes()
    if len(data) != info["bytes"]:
        raise GraphFormatError(f"{root}: {name} has {len(data)} bytes, manifest says {info['bytes']} (truncated)")
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise GraphFormatError(f"{root}: {name} fails its sha256 check (corrupt file)")
    return data


def _npy(data: bytes, name: str, root: Path) -> np.ndarray:
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # numpy raises several types for a bad header
        raise GraphFormatError(f"{root}: {name} is not a readable .npy array ({exc})") from exc


def load_graph(path, embedder, config: GraphConfig | None = None):
    """Load a graph written by :func:`save_graph`.

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
        Nothing at ``path``.
    GraphFormatError
        Corrupt, truncated, foreign or newer-version save.
    ValueError
        Embedder dimension differs from the saved one.
    """
    from .core import LiquidGraph

    root = Path(path)
    manifest = read_manifest(root)
    dim = int(manifest["embedder"]["dim"])
    if int(embedder.dim) != dim:
        raise ValueError(f"the graph at {root} was saved with {dim}-d embeddings "
                         f"({manifest['embedder'].get('name')}); the embedder given has dim {embedder.dim}")
    name = getattr(embedder, "name", None)
    if name is not None and name != manifest["embedder"].get("name"):
        warnings.warn(f"graph saved with embedder {manifest['embedder'].get('name')!r}, loading with {name!r}: "
                      "similarities between old and new texts may be meaningless", stacklevel=2)
    if config is None:
        try:
            config = GraphConfig.from_dict(manifest["config"])
        except (TypeError, ValueError) as exc:
            raise GraphFormatError(f"{root}: saved config is invalid ({exc})") from exc
    try:
        body = json.loads(_read_checked(root, "graph.json", manifest).decode("utf-8"))
        log_text = _read_checked(root, "oplog.jsonl", manifest).decode("utf-8")
        oplog = [json.loads(line) for line in log_text.splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GraphFormatError(f"{root}: graph.json or oplog.jsonl is not valid JSON ({exc})") from exc
    st = {"nodes": {"n": body["nodes"]["n"], "arrays": {}, "lists": {}},
          "edges": {"n": body["edges"]["n"], "arrays": {}, "lists": {}}}
    try:
        for part, spec in (("nodes", NODE_ARRAYS), ("edges", EDGE_ARRAYS)):
            for col, (dtype, _) in spec.items():
                fname = f"arrays/{part}_{col}.npy"
                arr = _npy(_read_checked(root, fname, manifest), fname, root)
                if arr.dtype != np.dtype(dtype):
                    raise GraphFormatError(f"{root}: {fname} has dtype {arr.dtype}, expected {np.dtype(dtype)}")
                st[part]["arrays"][col] = arr
            lists = ("text", "meta") if part == "nodes" else ("episodes", "sources")
            for col in lists:
                st[part]["lists"][col] = body[part][col]
        st["emb"] = _npy(_read_checked(root, "arrays/emb.npy", manifest), "emb.npy", root)
        st["rel_emb"] = _npy(_read_checked(root, "arrays/rel_emb.npy", manifest), "rel_emb.npy", root)
        st["rel_text"] = body["rel_text"]
        st["coact"] = body["coact"]
        st["tick"] = body["tick"]
        st["oplog_len"] = len(oplog)
    except KeyError as exc:
        raise GraphFormatError(f"{root}: graph.json lacks {exc}: corrupt or foreign save") from exc
    g = LiquidGraph(embedder, config=config, seed=manifest.get("seed"))
    try:
        g._load_state(st, oplog=oplog)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise GraphFormatError(f"{root}: inconsistent saved state ({exc})") from exc
    return g
