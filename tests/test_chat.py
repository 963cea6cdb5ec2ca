"""The terminal chat (``python -m mags_lib.chat``), driven through piped standard input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mags_lib import MAGS
from mags_lib.chat import HELP, ChatSession


@pytest.fixture()
def session():
    lines: list[str] = []
    m = MAGS.default(embedder="hash")
    s = ChatSession(m, write=lines.append)
    yield s, lines
    s.m.close()


def test_commands_without_a_language_model(session, tmp_path):
    s, out = session
    assert s.handle("/help") and out[-1] == HELP
    s.handle("/bogus")
    assert "unknown command /bogus" in out[-1]
    s.handle("/rollback")
    assert out[-1].startswith("error: no snapshot yet")
    s.handle("/rollback s42")
    assert out[-1].startswith("error: unknown snapshot 's42'")
    s.handle("/reward")
    assert "ask a question first" in out[-1]
    s.handle("/recall blorps")
    assert out[-1] == "(memory is empty)"
    s.handle("/say")
    assert out[-1] == "error: this command needs a text"
    s.handle("/snapshot")
    assert out[-1] == "snapshot s0"
    s.handle(f"/save {tmp_path / 'mem'}")
    assert out[-1].startswith("saved to")
    s.handle(f"/load {tmp_path / 'nothing'}")
    assert out[-1].startswith("error:") and "mags.json" in out[-1]
    assert s.m._owned == []  # none of this loaded a language model
    assert s.handle("") and not s.handle("/quit") and not s.handle("/exit")


@pytest.mark.slow
def test_piped_session_end_to_end(tmp_path):
    """A scripted session: store, ask, inspect, snapshot, roll back, save, load."""
    mem = tmp_path / "mem"
    html = tmp_path / "mem.html"
    script = "\n".join([
        "Blorps eat only frozen lemons.",
        "Quindles live under the Teal Bridge.",
        "What do blorps eat?",
        "/recall quindles",
        "/graph 5",
        "/snapshot",
        "/say Snarfs hum at dawn.",
        "/diff s0",
        "/rollback",
        "/reward 1",
        "/stats",
        f"/save {mem}",
        f"/load {mem}",
        f"/graph html {html}",
        "/quit",
        "Never read: the session ended.",
    ]) + "\n"
    r = subprocess.run([sys.executable, "-m", "mags_lib.chat", "--embedder", "hash"], input=script,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count("stored [T") == 3  # two statements (router) + /say
    assert "mags> " in out
    # the answer lists the facts it was given, each with its source ids
    assert any(ln.startswith("   - ") and "[T" in ln for ln in out.splitlines())
    assert "memory tokens" in out
    assert "snapshot s0" in out and "rolled back to s0" in out and "nodes_added=" in out
    assert "n_observations: 3" in out and "memory_tokens_mean" in out
    assert f"saved to {mem}" in out and f"loaded {mem}" in out
    assert (mem / "mags.json").is_file() and html.is_file()
    assert "Never read" not in out
    assert "Traceback" not in r.stderr and "TypeError" not in r.stderr


def test_bad_command_line_is_a_clean_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mags_lib.chat", "--load", str(tmp_path / "none")],
                       input="", capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "mags.json" in r.stderr and "Traceback" not in r.stderr


def test_a_failing_model_call_keeps_the_session_and_its_memory(tmp_path):
    """Any error of a turn or a command (a backend's RuntimeError, an ImportError...) is reported and the
    session goes on with its memory: it used to end the session with a traceback, losing what was unsaved."""
    from reliability_support import ScriptedBackend

    from mags_lib.agent import MAGSConfig

    lines: list[str] = []
    b = ScriptedBackend(["<memory_write>blorps,eat,lemons</memory_write>"])
    m = MAGS(MAGSConfig(embedder="hash"), backends={r: b for r in ("ask", "write", "answer", "router")})
    s = ChatSession(m, write=lines.append)
    s.handle("/say Blorps eat lemons.")
    assert lines[-1].startswith("stored")
    before = m.graph.stats()
    b.fail = RuntimeError("the backend went away")
    for line in ("Quindles hum.", "/say Quindles hum.", "/ask What do blorps eat?"):
        assert s.handle(line)
        assert lines[-1].startswith("error: RuntimeError: the backend went away"), lines[-1]
    assert m.graph.stats() == before and s.m is m
    s.handle(f"/save {tmp_path / 'kept'}")
    assert MAGS.load(tmp_path / "kept", backends=m._role_backend).graph.equals(m.graph)


def test_paths_are_read_as_a_shell_reads_them_and_graph_checks_its_count(session, tmp_path, monkeypatch):
    s, out = session
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    s.handle('/save "~/my mem"')
    assert out[-1] == f"saved to {tmp_path / 'my mem'}" and not (tmp_path / "~").exists()
    s.handle("/save a b")
    assert out[-1].startswith("error: this command takes one path")
    for bad in ("-1", "abc", "3 4"):
        s.handle(f"/graph {bad}")
        assert out[-1].startswith("error: /graph takes a number of facts"), out[-1]


def test_load_takes_the_saves_own_embedder(tmp_path):
    """A memory saved with one embedder, loaded into a session on another: it keeps its own (mixing them made
    recall meaningless, and a later save recorded one embedder in mags.json and another in the graph)."""
    lines: list[str] = []
    m = MAGS.default(embedder="hash-32")
    m.graph.add_episode("Blorps eat lemons.", source="T1")
    m.save(tmp_path / "a")
    s = ChatSession(MAGS.default(embedder="hash"), write=lines.append)
    s.handle(f"/load {tmp_path / 'a'}")
    assert lines[-1].startswith("loaded") and s.m.embedder.dim == 32 and s.m.config.embedder == "hash-32"
    s.m.close()
    m.close()
