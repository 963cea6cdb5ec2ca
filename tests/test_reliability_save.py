"""Crash safety and corruption of saves (issue 9, items 2 and 7).

* every step of the save sequence of ``save_graph`` and ``MAGS.save`` is a crash point: a forked
  child dies (``os._exit``, no cleanup runs) exactly there, and the folder then loads as the
  previous or the new save; an exception at every step leaves the previous save and no leftovers;
* a real-kill test SIGKILLs a process that saves in a loop, at random moments, 60 times;
* the manifest and ``mags.json`` are checksummed: a hand edit is reported, naming the file; a
  hand-broken file with a valid checksum gets an error naming the file and the field;
* a corruption fuzz (the probe that found these, kept) breaks saves 240 ways: load either works
  or raises the format error, never a bare TypeError / KeyError / AttributeError.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import sys
import time

import numpy as np
import pytest

from mags_lib.agent import MAGS, MAGSConfig, MAGSFormatError
from mags_lib.embed import HashEmbedder
from mags_lib.graph import GraphFormatError, LiquidGraph, atomic, persistence

EMB = HashEmbedder(dim=32)
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fault injection forks a child process")


@pytest.fixture
def no_fsync(monkeypatch):
    """Crashes here are process deaths, not power losses: the page cache survives them, so fsync
    (slow on a shared disk) changes nothing these tests observe. The rename sequence is unchanged."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def graph_a() -> LiquidGraph:
    g = LiquidGraph(EMB, seed=1)
    ep = g.add_episode("Blorps eat frozen lemons.", source="D1:1", time="2023-05-08")
    g.engram([("blorps", "eat", "frozen lemons"), ("blorps", "live in", "caves")], episode=ep)
    g.recall("what do blorps eat", k=3)
    return g


def graph_b() -> LiquidGraph:
    g = graph_a()
    ep = g.add_episode("Blorps moved to the trees.", source="D1:2")
    g.engram([("blorps", "live in", "trees")], episode=ep)
    g.maintain()
    return g


def siblings(p):
    """What lies beside save folder ``p`` (the tests' probe folder excepted)."""
    return sorted(x.name for x in p.parent.iterdir() if x.name not in (p.name, "probe"))


def run_in_child(fn) -> int:
    """Run ``fn`` in a forked child; return its exit status (a crash in fn exits with 77)."""
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            fn()
        except BaseException:  # noqa: BLE001 - the child must never return into pytest
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def steps_of(save) -> list[str]:
    seen: list[str] = []
    atomic.FAULT_HOOK = seen.append
    try:
        save()
    finally:
        atomic.FAULT_HOOK = None
    return seen


def crash_at(i: int):
    count = {"n": 0}

    def hook(name):
        if count["n"] == i:
            os._exit(77)
        count["n"] += 1
    return hook


def check_crashes(tmp_path, make_prev, save_new, load, is_prev, is_new):
    """Crash the new save at every one of its steps; the folder must load as previous or new."""
    probe = tmp_path / "probe" / "mem"
    if make_prev is not None:
        make_prev(probe)
    n_steps = len(steps_of(lambda: save_new(probe)))  # the same sequence as below
    assert n_steps >= 20
    outcomes = []
    for i in range(n_steps):
        p = tmp_path / f"c{i}" / "mem"
        p.parent.mkdir()
        if make_prev is not None:
            make_prev(p)

        def child(i=i, p=p):
            atomic.FAULT_HOOK = crash_at(i)
            save_new(p)
        assert run_in_child(child) == 77, f"step {i} was not reached"
        if make_prev is None:
            try:
                got = load(p)
            except FileNotFoundError:
                outcomes.append("none")
                continue
        else:
            got = load(p)
        if is_new(got):
            outcomes.append("new")
        else:
            assert is_prev(got), f"crash at step {i}: loaded something that is neither save"
            outcomes.append("prev")
        # the next save works and leaves nothing but the save itself
        save_new(p)
        assert is_new(load(p)) and siblings(p) == []
    # a crash before the swap keeps the previous save, one after it the new one
    assert outcomes[0] in ("prev", "none") and outcomes[-1] == "new"
    return outcomes


def test_save_graph_survives_a_crash_at_every_step(tmp_path, no_fsync):
    a, b = graph_a(), graph_b()
    out = check_crashes(tmp_path, make_prev=a.save, save_new=b.save,
                        load=lambda p: LiquidGraph.load(p, EMB), is_prev=a.equals, is_new=b.equals)
    assert "prev" in out and "new" in out


def test_first_save_crash_leaves_nothing_or_the_save(tmp_path, no_fsync):
    b = graph_b()
    out = check_crashes(tmp_path, make_prev=None, save_new=b.save,
                        load=lambda p: LiquidGraph.load(p, EMB), is_prev=lambda g: False, is_new=b.equals)
    assert "none" in out and "new" in out


def agent(g: LiquidGraph) -> MAGS:
    m = MAGS(MAGSConfig(embedder="hash"), graph=g.copy(), embedder=EMB)
    m.n_observations = g.stats()["n_episodes"]
    return m


def test_mags_save_survives_a_crash_at_every_step(tmp_path, no_fsync):
    ma, mb = agent(graph_a()), agent(graph_b())
    out = check_crashes(tmp_path, make_prev=ma.save, save_new=mb.save,
                        load=lambda p: MAGS.load(p, embedder=EMB),
                        is_prev=lambda m: m.graph.equals(ma.graph) and m.n_observations == 1,
                        is_new=lambda m: m.graph.equals(mb.graph) and m.n_observations == 2)
    assert "prev" in out and "new" in out


def test_an_exception_at_every_step_keeps_the_previous_save(tmp_path, no_fsync):
    a, b = graph_a(), graph_b()
    p = tmp_path / "mem"
    a.save(p)
    a.save(tmp_path / "probe" / "mem")
    n = len(steps_of(lambda: b.save(tmp_path / "probe" / "mem")))
    assert n >= 20
    failed = 0
    for i in range(n):
        count = {"n": 0}

        def hook(name, i=i, count=count):
            if count["n"] == i:
                raise OSError(f"injected failure at {name}")
            count["n"] += 1
        atomic.FAULT_HOOK = hook
        try:
            b.save(p)
        except OSError:
            failed += 1
        finally:
            atomic.FAULT_HOOK = None
        got = LiquidGraph.load(p, EMB)
        assert got.equals(a) or got.equals(b)
        if not got.equals(a):  # the failure came after the swap: put the previous save back
            a.save(p)
        assert siblings(p) == [], f"leftovers after a failure at step {i}"
    assert failed >= n - 2  # the last steps (cleanup after the swap) may be best-effort


def test_load_recovers_a_save_left_between_the_renames(tmp_path):
    """The case of the issue: the old save renamed away, the new one not yet in place."""
    a, b = graph_a(), graph_b()
    p = tmp_path / "mem"
    a.save(p)
    a.save(tmp_path / "probe" / "mem")
    names = steps_of(lambda: b.save(tmp_path / "probe" / "mem"))  # the same sequence: over a previous save
    i = names.index("swap:rename-new")
    assert names[i - 1] == "swap:rename-old"
    assert run_in_child(lambda: (setattr(atomic, "FAULT_HOOK", crash_at(i)), b.save(p))) == 77
    assert not p.exists() and any(".old-" in s for s in siblings(p))
    assert LiquidGraph.load(p, EMB).equals(b)  # the sealed new save wins
    assert p.is_dir() and siblings(p) == []


def test_stale_tmp_dirs_of_dead_saves_are_cleaned(tmp_path):
    a = graph_a()
    p = tmp_path / "mem"
    a.save(p)
    names = steps_of(lambda: a.save(tmp_path / "probe" / "mem"))
    assert names[2].startswith("write:") and names[5].startswith("write:")
    assert run_in_child(lambda: (setattr(atomic, "FAULT_HOOK", crash_at(2)), a.save(p))) == 77
    first = [s for s in siblings(p) if ".tmp-" in s]
    assert len(first) == 1  # a killed save's temporary folder
    assert run_in_child(lambda: (setattr(atomic, "FAULT_HOOK", crash_at(5)), a.save(p))) == 77
    second = [s for s in siblings(p) if ".tmp-" in s]
    assert len(second) == 1 and second != first  # the next save removed the stale one first
    assert LiquidGraph.load(p, EMB).equals(a)
    assert siblings(p) == []  # and a load removes it too


def test_a_live_saver_leftovers_are_not_touched(tmp_path):
    a = graph_a()
    p = tmp_path / "mem"
    a.save(p)
    mine = p.parent / f".mem.tmp-{os.getpid()}-{time.time_ns()}-0"
    atomic._ACTIVE.add(str(mine))
    mine.mkdir()
    try:
        LiquidGraph.load(p, EMB)
        a.save(p)
        assert mine.exists()  # an in-flight save of this process
    finally:
        atomic._ACTIVE.discard(str(mine))
    a.save(p)
    assert not mine.exists()


# -- real SIGKILLs --------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigkill_during_saves_always_leaves_a_loadable_save(tmp_path, no_fsync):
    """60 real SIGKILLs of a process saving two graphs in turn, at random moments (about 10 s)."""
    a, b = graph_a(), graph_b()
    rng = random.Random(0)
    p = tmp_path / "mem"
    a.save(p)
    kills = 0
    seen = set()
    mid_save = 0
    for _ in range(60):
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(ready_r)
                k = 0
                while True:
                    (a if k % 2 else b).save(p)
                    if k == 0:  # saving in a loop now: every moment from here on is inside or between saves
                        os.write(ready_w, b"1")
                    k += 1
            finally:
                os._exit(0)
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"1"  # however loaded the machine, the kill lands in the save loop
        os.close(ready_r)
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        kills += 1
        if any(".tmp-" in s or ".new-" in s or ".old-" in s for s in siblings(p)) or not p.exists():
            mid_save += 1
        got = LiquidGraph.load(p, EMB)
        seen.add("a" if got.equals(a) else "b" if got.equals(b) else "?")
    assert kills == 60 and "?" not in seen
    assert mid_save >= 10, "the kills should often land inside a save"
    a.save(p)
    assert siblings(p) == []


# -- item 7: checksums and hand-broken files ---------------------------------------------------------
def test_edited_manifest_is_detected(tmp_path):
    p = graph_a().save(tmp_path / "mem")
    m = json.loads((p / "manifest.json").read_text())
    assert m["config"]["engram"]["resolve_threshold"] == 0.9
    m["config"]["engram"]["resolve_threshold"] = 0.1
    (p / "manifest.json").write_text(json.dumps(m, indent=1))
    with pytest.raises(GraphFormatError, match=r"manifest\.json.*checksum"):
        LiquidGraph.load(p, EMB)


def test_edited_mags_json_is_detected(tmp_path):
    p = agent(graph_a()).save(tmp_path / "m")
    s = json.loads((p / "mags.json").read_text())
    s["config"]["recall_k"] = 3
    (p / "mags.json").write_text(json.dumps(s))
    with pytest.raises(MAGSFormatError, match=r"mags\.json.*checksum"):
        MAGS.load(p, embedder=EMB)


def rewrite_json(f, edit):
    """Edit a checksummed JSON file and recompute its checksum (a careful hand edit)."""
    s = json.loads(f.read_text())
    edit(s)
    s.pop("checksum", None)
    s["checksum"] = atomic.json_checksum(s)
    f.write_text(json.dumps(s))


def rewrite_mags_json(p, edit):
    rewrite_json(p / "mags.json", edit)


@pytest.mark.parametrize("edit,field", [
    (lambda s: s.update(n_observations="many"), "n_observations"),
    (lambda s: s.update(turn=-3), "turn"),
    (lambda s: s.update(memory_tokens={"a": 1}), "memory_tokens"),
    (lambda s: s.update(memory_tokens=[1, "x"]), "memory_tokens"),
    (lambda s: s.update(config=[1, 2]), "config"),
    (lambda s: s["config"].update(recall_k="ten"), "recall_k"),
    (lambda s: s["config"].update(graph="big"), "graph"),
    (lambda s: s["config"].update(graph={"engram": {"resolve_threshold": "x"}}), "resolve_threshold"),
    (lambda s: s["config"].update(bogus=1), "bogus"),
    (lambda s: s.pop("config"), "config"),
    (lambda s: s.update(version="2"), "version"),
    (lambda s: s.update(consolidated=5), "consolidated"),
])
def test_hand_broken_mags_json_names_the_field(tmp_path, edit, field):
    p = agent(graph_a()).save(tmp_path / "m")
    rewrite_mags_json(p, edit)
    with pytest.raises(MAGSFormatError, match=field) as info:
        MAGS.load(p, embedder=EMB)
    assert "mags.json" in str(info.value)


def rewrite_manifest(p, edit):
    rewrite_json(p / "manifest.json", edit)


@pytest.mark.parametrize("edit,field", [
    (lambda m: m.update(embedder="hash"), "embedder"),
    (lambda m: m["embedder"].update(dim="32"), "dim"),
    (lambda m: m.update(files=[]), "files"),
    (lambda m: m["files"]["graph.json"].update(bytes="12"), "bytes"),
    (lambda m: m.update(config={"engram": {"gat_k": "three"}}), "gat_k"),
    (lambda m: m.update(seed="x"), "seed"),
])
def test_hand_broken_manifest_names_the_field(tmp_path, edit, field):
    p = graph_a().save(tmp_path / "mem")
    rewrite_manifest(p, edit)
    with pytest.raises(GraphFormatError, match=field) as info:
        LiquidGraph.load(p, EMB)
    assert "manifest.json" in str(info.value)


# -- corruption fuzz -----------------------------------------------------------------------------
def _reseal(root, name):
    """Recompute the hash of file ``name`` in the manifest, so only structure checks can catch it."""
    data = (root / name).read_bytes()

    def edit(m):
        m["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    rewrite_manifest(root, edit)


def _json_mutations(obj, rng):
    """Yield a structurally broken copy of a JSON document: one value replaced or removed."""
    paths = []

    def walk(x, path):
        paths.append(path)
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, path + (k,))
        elif isinstance(x, list) and x:
            i = rng.randrange(len(x))
            walk(x[i], path + (i,))
    walk(obj, ())
    path = rng.choice(paths[1:])
    doc = json.loads(json.dumps(obj))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    k = path[-1]
    choice = rng.randrange(4)
    if choice == 0 and isinstance(parent, dict):
        del parent[k]
    else:
        parent[k] = rng.choice([None, "x", -1, 1.5, [], {}, [[1]], True, 10 ** 12])
    return doc


@pytest.mark.parametrize("seed", range(6))
def test_corrupted_graph_saves_fail_cleanly(tmp_path, seed):
    """40 corruptions per seed: byte flips, truncation, deletion, structure edits behind valid hashes."""
    rng = random.Random(seed)
    g = graph_b()
    src = g.save(tmp_path / "orig")
    files = sorted(str(x.relative_to(src)) for x in src.rglob("*") if x.is_file())
    outcomes = {"ok": 0, "format": 0}
    for j in range(40):
        p = tmp_path / f"c{j}"
        shutil.copytree(src, p)
        name = rng.choice(files)
        f = p / name
        data = f.read_bytes()
        kind = rng.randrange(5)
        if kind == 0:
            f.write_bytes(data[: rng.randrange(len(data))])
        elif kind == 1:
            b = bytearray(data)
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
            f.write_bytes(bytes(b))
        elif kind == 2:
            f.unlink()
        elif name.endswith((".json", ".jsonl")):
            if name.endswith(".jsonl"):
                lines = data.decode().splitlines()
                k = rng.randrange(len(lines))
                lines[k] = json.dumps(_json_mutations(json.loads(lines[k]), rng))
                f.write_text("\n".join(lines) + "\n")
            else:
                doc = _json_mutations(json.loads(data), rng)
                f.write_text(json.dumps(doc))
            if name != "manifest.json":
                _reseal(p, name)
            elif rng.random() < 0.7:
                rewrite_manifest(p, lambda m: None)
        else:
            arr = np.load(f)
            np.save(f, arr[:-1] if arr.size and rng.random() < 0.5 else arr.astype(np.float32))
            _reseal(p, name)
        try:
            h = LiquidGraph.load(p, EMB)
        except (GraphFormatError, FileNotFoundError):
            outcomes["format"] += 1
            continue
        except Exception as exc:  # anything else is a defect
            raise AssertionError(f"{name}, corruption {kind}: bare {type(exc).__name__}: {exc}") from exc
        outcomes["ok"] += 1
        h.recall("blorps", k=3)  # what loads must work
        h.maintain()
        h.save(tmp_path / "resave")
    assert outcomes["format"] >= 25, outcomes


@pytest.mark.parametrize("name", ["graph.json", "oplog.jsonl", "manifest.json"])
def test_structure_edits_behind_valid_hashes_fail_cleanly(tmp_path, name):
    """60 edits of one JSON value per file, its hash in the manifest (and the manifest's checksum)
    recomputed: only the structure checks stand between the edit and the loader."""
    rng = random.Random(name)
    g = graph_b()
    src = g.save(tmp_path / "orig")
    failed = 0
    for j in range(60):
        p = tmp_path / f"c{j}"
        shutil.copytree(src, p)
        f = p / name
        if name.endswith(".jsonl"):
            lines = f.read_text().splitlines()
            k = rng.randrange(len(lines))
            lines[k] = json.dumps(_json_mutations(json.loads(lines[k]), rng))
            f.write_text("\n".join(lines) + "\n")
            _reseal(p, name)
        elif name == "graph.json":
            f.write_text(json.dumps(_json_mutations(json.loads(f.read_text()), rng)))
            _reseal(p, name)
        else:
            m = _json_mutations(json.loads(f.read_text()), rng)
            m.pop("checksum", None)
            m["checksum"] = atomic.json_checksum(m)
            f.write_text(json.dumps(m))
        try:
            h = LiquidGraph.load(p, EMB)
        except (GraphFormatError, ValueError) as exc:
            assert name in str(exc) or "config" in str(exc) or "dim" in str(exc), exc
            failed += 1
            continue
        except Exception as exc:
            raise AssertionError(f"edit {j} of {name}: bare {type(exc).__name__}: {exc}") from exc
        h.recall("blorps", k=3)  # a benign edit (e.g. of a statistic) must leave a working graph
        h.maintain()
        try:
            h.replayed()
        except ValueError as exc:  # an edited log may not replay: it must say which entry
            assert "cannot be replayed" in str(exc), exc
    assert failed >= 20


def test_corrupted_mags_saves_fail_cleanly(tmp_path):
    rng = random.Random(7)
    src = agent(graph_b()).save(tmp_path / "orig")
    for j in range(30):
        p = tmp_path / f"c{j}"
        shutil.copytree(src, p)
        doc = json.loads((p / "mags.json").read_text())
        doc.pop("checksum")
        broken = _json_mutations(doc, rng)
        broken["checksum"] = atomic.json_checksum(broken)
        (p / "mags.json").write_text(json.dumps(broken))
        try:
            MAGS.load(p, embedder=EMB)
        except (MAGSFormatError, GraphFormatError):
            continue
        except Exception as exc:
            raise AssertionError(f"bare {type(exc).__name__}: {exc}") from exc
    # a foreign or truncated file
    for text in ("", "[]", "{\"format\": \"mags-agent\"", "null", "\"x\""):
        (p / "mags.json").write_text(text)
        with pytest.raises(MAGSFormatError, match="mags.json"):
            MAGS.load(p, embedder=EMB)


def test_old_version_1_saves_still_load(tmp_path):
    """Saves written before the checksums (format version 1) load, with their files still hashed."""
    g = graph_a()
    p = g.save(tmp_path / "mem")
    m = json.loads((p / "manifest.json").read_text())
    m.pop("checksum")
    m["version"] = 1
    (p / "manifest.json").write_text(json.dumps(m))
    assert LiquidGraph.load(p, EMB).equals(g)
    assert persistence.FORMAT_VERSION >= 2


def test_json_checksum_ignores_key_order_and_whitespace():
    a = {"b": 1, "a": [1, 2, {"c": "é"}]}
    b = json.loads(json.dumps(a, indent=3, sort_keys=True))
    assert atomic.json_checksum(a) == atomic.json_checksum(b)
    assert atomic.json_checksum(a) != atomic.json_checksum({**a, "b": 2})
    assert sys.getrecursionlimit() > 0
