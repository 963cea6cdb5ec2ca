"""Crash-safe replacement of a save directory (one mechanism for graph saves and agent saves).

A save directory ``<parent>/<name>`` is replaced in this order; every step is a crash point::

    1. write every file into  .<name>.tmp-<pid>-<ns>-<r>/   (each file fsynced, then the folders)
    2. seal:  rename it to    .<name>.new-<pid>-<ns>-<r>/   (complete by construction)
    3. if <name> exists, rename it to .<name>.old-<pid>-<ns>-<r>/
    4. rename the sealed .new-... to <name>                  (the new save is in place)
    5. remove .old-...

``<pid>`` is the saving process and ``<ns>`` its clock in nanoseconds, so leftovers sort by age and
their owner can be asked whether it is still running. :func:`recover` (run by every load and at
the start of every save) puts things right after a crash:

* ``<name>`` exists: it is the save; leftovers whose owner is gone (``.tmp`` never sealed, a
  ``.new`` that never got swapped in, an ``.old`` not yet removed) are deleted;
* ``<name>`` is missing (a crash between steps 3 and 4): the newest sealed ``.new`` or ``.old`` of a
  finished process is renamed back to ``<name>`` -- the new save if it was sealed, otherwise the
  previous one -- and the rest is deleted.

Leftovers of a save still running (in this process, or in another live process) are never
touched. So after a crash at any point, the folder loads as the previous save or the new one.

A failure that is an exception rather than a crash undoes the save at once: the previous save is
put back if it had been moved, and the temporary folders are removed.

:func:`json_checksum` gives the canonical checksum that manifests (``manifest.json``,
``mags.json``) carry, so a hand edit is detected.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FAULT_HOOK", "fsync_dir", "json_checksum", "read_manifest_json", "recover", "save_dir", "write_file"]

FAULT_HOOK: Callable[[str], None] | None = None
"""Test seam: called with the name of every step of a save before the step runs (fault injection)."""

_ACTIVE: set[str] = set()  # leftover paths of saves in flight in this process
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<tag>tmp|new|old)-(?P<pid>\d+)-(?P<ns>\d+)-(?P<r>[0-9a-z]+)$")


def _step(name: str) -> None:
    hook = FAULT_HOOK
    if hook is not None:
        hook(name)


def json_checksum(doc: object) -> str:
    """``"sha256:<hex>"`` of the canonical JSON of ``doc`` (sorted keys, no spaces, ASCII).

    >>> json_checksum({"b": 1, "a": 2}) == json_checksum({"a": 2, "b": 1})
    True
    """
    text = json.dumps(doc, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def read_manifest_json(raw: bytes, where: str, *, fmt: str, version: int, error: type[Exception],
                       what: str, hint: str, checksum_since: int = 2) -> dict:
    """Parse a save's manifest and check its ``format``, ``version`` and (from version
    ``checksum_since`` on) its ``checksum`` (:func:`json_checksum` of everything else).

    Raises ``error`` naming ``where`` (the file) and what is wrong; ``what`` names the kind of save
    (``"LiquidGraph save"``), ``hint`` says what to do instead of editing the file by hand.
    """
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise error(f"{where} is corrupt or truncated ({exc}); restore it from a backup") from exc
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise error(f"{where} holds format {found!r}, not {fmt!r}: not a {what}")
    ver = doc.get("version")
    if isinstance(ver, bool) or not isinstance(ver, int):
        raise error(f"{where}: field 'version' must be an integer, got {ver!r}")
    if not 1 <= ver <= version:
        raise error(f"{where} has format version {ver}; this mags_lib reads versions 1..{version} "
                    "(upgrade mags_lib to read newer saves)")
    if ver >= checksum_since:
        try:
            ok = doc.get("checksum") == json_checksum({k: v for k, v in doc.items() if k != "checksum"})
        except ValueError:
            ok = False
        if not ok:
            raise error(f"{where} fails its checksum: the file was edited or is corrupt. {hint}")
    return doc


def fsync_dir(path: Path) -> None:
    """fsync a directory (makes renames and new entries in it durable); a no-op where unsupported."""
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


def write_file(path: Path, data: bytes, root: Path) -> None:
    """Write ``data`` to ``path`` (inside the save folder ``root``) and fsync it."""
    _step(f"write:{path.relative_to(root).as_posix()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@dataclass(frozen=True)
class _Leftover:
    path: Path
    tag: str
    pid: int
    ns: int


def _leftovers(path: Path) -> list[_Leftover]:
    out = []
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return out
    for p in entries:
        m = _LEFTOVER.match(p.name)
        if m and m.group("name") == path.name:
            out.append(_Leftover(p, m.group("tag"), int(m.group("pid")), int(m.group("ns"))))
    return out


def _in_flight(lo: _Leftover) -> bool:
    """Whether the save that made ``lo`` may still be running."""
    if lo.pid == os.getpid():
        return str(lo.path) in _ACTIVE
    try:
        os.kill(lo.pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        return True
    return True


def recover(path, *, is_save: Callable[[Path], bool]) -> Path | None:
    """Complete or undo an interrupted save at ``path`` (see the module docstring).

    Parameters
    ----------
    path : str or Path
        The save folder.
    is_save : callable
        ``is_save(folder)``: whether a folder holds a complete save (its marker file exists).

    Returns
    -------
    Path or None
        The folder to read the save from (``path``, or a sealed leftover that could not be moved
        back because its save is still running or the location is read-only), or None when there
        is no save at all.
    """
    path = Path(path)
    leftovers = _leftovers(path)
    found: Path | None = path if path.is_dir() else None
    if found is None and not path.exists():
        cands = [lo for lo in leftovers if lo.tag in ("new", "old") and lo.path.is_dir() and is_save(lo.path)]
        if cands:
            best = max(cands, key=lambda lo: (lo.ns, lo.tag == "new"))
            found = best.path
            if not _in_flight(best):
                try:
                    os.replace(best.path, path)
                    fsync_dir(path.parent)
                    found = path
                except OSError:
                    pass
    for lo in leftovers:
        if lo.path != found and lo.path.exists() and not _in_flight(lo):
            shutil.rmtree(lo.path, ignore_errors=True)
    return found


def save_dir(path, fill: Callable[[Path], None], *, is_save: Callable[[Path], bool], what: str) -> Path:
    """Write a save folder at ``path`` crash-safely, replacing an earlier save there.

    Parameters
    ----------
    path : str or Path
        Target folder. If it exists it must be an earlier save (``is_save``) or empty: a folder
        with other content is never replaced.
    fill : callable
        ``fill(folder)`` writes every file of the save into the fresh ``folder`` (with
        :func:`write_file`).
    is_save : callable
        ``is_save(folder)``: whether a folder holds a complete save.
    what : str
        What is saved, for error messages (``"saved graph"``, ``"saved MAGS folder"``).

    Returns
    -------
    Path
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover(path, is_save=is_save)
    if path.exists():
        if not path.is_dir():
            raise FileExistsError(f"{path} exists and is not a directory; choose another path")
        if not is_save(path) and any(path.iterdir()):
            raise FileExistsError(f"{path} is a non-empty directory that is not a {what}; refusing to "
                                  "overwrite it (choose a new or empty path)")
    tag = f"{os.getpid()}-{time.time_ns()}-{uuid.uuid4().hex[:6]}"
    tmp, new, old = (path.parent / f".{path.name}.{kind}-{tag}" for kind in ("tmp", "new", "old"))
    mine = {str(tmp), str(new), str(old)}
    _ACTIVE.update(mine)
    swapped = False
    try:
        tmp.mkdir()
        fill(tmp)
        _step("fsync:folders")
        for d in sorted({p.parent for p in tmp.rglob("*")} | {tmp}, key=lambda p: -len(p.parts)):
            fsync_dir(d)
        _step("seal")
        os.replace(tmp, new)
        fsync_dir(path.parent)
        if path.exists():
            _step("swap:rename-old")
            os.replace(path, old)
        _step("swap:rename-new")
        os.replace(new, path)
        swapped = True
        _step("swap:fsync")
        fsync_dir(path.parent)
    except BaseException as exc:
        if not swapped:
            if not path.exists() and old.exists():
                os.replace(old, path)  # put the previous save back
            for d in (tmp, new):
                shutil.rmtree(d, ignore_errors=True)
            raise
        if not isinstance(exc, OSError):
            raise
        # an OSError after the swap (the final fsync): the new save is in place and stays
    finally:
        if swapped:
            try:
                _step("cleanup:old")
            except OSError:
                pass  # the save is in place; removing the previous one is best-effort
            finally:
                shutil.rmtree(old, ignore_errors=True)
        _ACTIVE.difference_update(mine)
    return path
