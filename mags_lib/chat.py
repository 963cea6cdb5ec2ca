"""Interactive terminal session with a MAGS agent: ``python -m mags_lib.chat``.

Type a statement to store it, a question to ask it (the router decides), or a command:

    /say TEXT          store TEXT (skip the router)         /ask TEXT       answer TEXT from memory
    /recall QUERY      ranked memory items for QUERY        /graph [N]      stats and the N strongest facts
    /graph html PATH   interactive HTML of the memory (last recall highlighted)
    /snapshot          snapshot the memory                  /snapshots      list snapshots
    /rollback [ID]     restore a snapshot (default: last)   /diff ID [ID]   changes between snapshots
    /save PATH         save memory + configuration          /load PATH      load a saved session
    /maintain          one tick of the graph dynamics       /reward [R]     reinforce the last answer's paths
    /stats             memory and latency statistics        /help           this text
    /quit              leave (also /exit, end of input)

Reads standard input line by line, so a session can be scripted:
``printf 'Blorps eat lemons.\\nWhat do blorps eat?\\n/stats\\n' | python -m mags_lib.chat``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from typing import TextIO

__all__ = ["HELP", "ChatSession", "main"]

HELP = "\n".join(__doc__.split("\n\n")[1:3])


class ChatSession:
    """Turns lines of text into MAGS calls and printable replies (the logic of the terminal chat).

    Parameters
    ----------
    mags : MAGS
    write : callable
        Where replies go (default ``print``).
    """

    def __init__(self, mags, write: Callable[[str], None] = print) -> None:
        self.m = mags
        self.write = write
        self.last_answer = None
        self.last_snapshot: str | None = None

    # -- dispatch ----------------------------------------------------------------------------------
    def handle(self, line: str) -> bool:
        """Process one input line; returns False when the session should end."""
        line = line.strip()
        if not line:
            return True
        if not line.startswith("/"):
            self._turn(line)
            return True
        cmd, _, arg = line[1:].partition(" ")
        cmd, arg = cmd.lower(), arg.strip()
        if cmd in ("quit", "exit", "q"):
            return False
        handler = getattr(self, f"_cmd_{cmd}", None)
        if handler is None:
            self.write(f"unknown command /{cmd}; /help lists the commands")
            return True
        try:
            handler(arg)
        except KeyError as e:
            self.write(f"error: {e.args[0] if e.args else e}")
        except (ValueError, TypeError, OSError) as e:
            self.write(f"error: {e}")
        except Exception as e:  # noqa: BLE001 - a model or library failure must not end the session
            self.write(f"error: {type(e).__name__}: {e} (the memory is as before the command; /save keeps it)")
        return True

    def _turn(self, text: str) -> None:
        from .agent import Answer

        try:
            r = self.m.turn(text)
        except (ValueError, TypeError) as e:
            self.write(f"error: {e}")
            return
        except Exception as e:  # noqa: BLE001 - a failed turn leaves no trace; the session, and its memory, go on
            self.write(f"error: {type(e).__name__}: {e} (nothing was stored or changed; /save keeps the memory)")
            return
        if isinstance(r, Answer):
            self._show_answer(r)
        else:
            self._show_observation(r)

    # -- display -----------------------------------------------------------------------------------
    def _show_observation(self, o) -> None:
        trip = "; ".join(f"({s} | {r} | {ob})" for s, r, ob in o.triplets) or "(no triplet)"
        self.write(f"stored [{o.source}] {trip}  ({o.seconds:.2f} s)")

    def _show_answer(self, a) -> None:
        self.last_answer = a
        self.write(f"mags> {a.answer}")
        for it, fact in zip(a.items, a.facts):
            self.write(f"   - {fact}  [{', '.join(it.sources)}]")
        t = a.timings
        self.write(f"   ({a.seconds:.2f} s: ask {t['ask']:.2f}, recall {t['recall']:.2f}, answer "
                   f"{t['answer']:.2f}; {a.memory_tokens} memory tokens; queries: {a.queries})")

    # -- commands ----------------------------------------------------------------------------------
    def _need(self, arg: str, what: str) -> str:
        if not arg:
            raise ValueError(f"this command needs {what}")
        return arg

    def _path(self, arg: str, what: str) -> str:
        """One path argument: quotes as a shell reads them (shlex), ``~`` expanded."""
        parts = shlex.split(self._need(arg, what))
        if len(parts) != 1:
            raise ValueError(f"this command takes one path ({what}); quote a path that holds spaces")
        return os.path.expanduser(parts[0])

    def _cmd_help(self, arg: str) -> None:
        self.write(HELP)

    def _cmd_say(self, arg: str) -> None:
        self._show_observation(self.m.observe(self._need(arg, "a text")))

    def _cmd_ask(self, arg: str) -> None:
        self._show_answer(self.m.ask(self._need(arg, "a question")))

    def _cmd_recall(self, arg: str) -> None:
        hits = self.m.recall(self._need(arg, "a query"), k=self.m.config.recall_k)
        if not hits:
            self.write("(memory is empty)")
        for i, h in enumerate(hits, 1):
            self.write(f"{i:>2}. {h.score:.3f} {h.kind:<7} {h.text}  [{', '.join(h.sources)}]")

    def _cmd_graph(self, arg: str) -> None:
        parts = shlex.split(arg)
        if parts and parts[0] == "html":
            from .graph import viz

            if len(parts) != 2:
                raise ValueError("/graph html takes one output path, e.g. /graph html memory.html (quote spaces)")
            path = os.path.expanduser(parts[1])
            trace = self.last_answer.recall if self.last_answer is not None else None
            out = viz.save_html(self.m.graph, path, trace=trace)
            self.write(f"wrote {out}")
            return
        if parts and not (parts[0].isdigit() and len(parts) == 1):
            raise ValueError(f"/graph takes a number of facts to list (e.g. /graph 20) or html PATH, got {arg!r}")
        n = int(parts[0]) if parts else 15
        st = self.m.graph.stats()
        self.write(f"{st['n_nodes']} nodes ({st['n_entities']} entities, {st['n_episodes']} episodes), "
                   f"{st['n_valid_edges']} valid edges, {st['n_facts']} facts, "
                   f"{st['n_invalidated']} superseded")
        facts = sorted(self.m.graph.facts(), key=lambda f: -f["strength"])[:n]
        for f in facts:
            self.write(f"   {f['subject']} --{f['relation']}--> {f['object']}  "
                       f"(strength {f['strength']:.2f}) [{', '.join(f['sources'])}]")

    def _cmd_snapshot(self, arg: str) -> None:
        self.last_snapshot = self.m.snapshot()
        self.write(f"snapshot {self.last_snapshot}")

    def _cmd_snapshots(self, arg: str) -> None:
        self.write(", ".join(self.m.graph.snapshots) or "(no snapshot)")

    def _cmd_rollback(self, arg: str) -> None:
        sid = arg or self.last_snapshot
        if not sid:
            raise ValueError("no snapshot yet: /snapshot first")
        self.m.rollback(sid)
        st = self.m.graph.stats()
        self.write(f"rolled back to {sid}: {st['n_nodes']} nodes, {st['n_valid_edges']} valid edges")

    def _cmd_diff(self, arg: str) -> None:
        ids = shlex.split(self._need(arg, "one or two snapshot ids"))
        d = self.m.graph.diff(ids[0], ids[1] if len(ids) > 1 else None)
        self.write(" ".join(f"{k}={v}" for k, v in d.summary().items()))

    def _cmd_save(self, arg: str) -> None:
        self.write(f"saved to {self.m.save(self._path(arg, 'a folder path'))}")

    def _cmd_load(self, arg: str) -> None:
        from .agent import MAGS

        # the save's own embedder (this session's may differ: mixing them makes recall meaningless); a shared
        # instance when it is the same one
        new = MAGS.load(self._path(arg, "a folder path"))
        self.m.close()
        self.m = new
        self.last_answer = None
        self.write(f"loaded {arg}: {new.graph.stats()['n_nodes']} nodes")

    def _cmd_maintain(self, arg: str) -> None:
        rep = self.m.maintain()
        self.write(f"tick {rep.tick}: {rep.n_nodes} nodes, {rep.n_edges} edges ({rep.total_seconds:.3f} s)")

    def _cmd_reward(self, arg: str) -> None:
        if self.last_answer is None:
            raise ValueError("no answer to reward yet: ask a question first")
        r = float(arg) if arg else 1.0
        self.m.feedback(self.last_answer, reward=r)
        self.write(f"reinforced the paths of the last answer (reward {r:+g})")

    def _cmd_stats(self, arg: str) -> None:
        for k, v in self.m.stats().items():
            self.write(f"   {k}: {v:.3f}" if isinstance(v, float) else f"   {k}: {v}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mags_lib.chat", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["llamacpp", "transformers", "vllm"], help="default: llamacpp")
    p.add_argument("--models", choices=["base", "trained"],
                   help="embedded base models (default), or the trained ask/write/answer models of "
                   "--trained-tag under models/<role>/<tag>/")
    p.add_argument("--trained-tag", help="run tag of the trained models (default: default)")
    p.add_argument("--ask-model", help="ask model (.gguf or folder); overrides --models")
    p.add_argument("--write-model", help="write model (.gguf or folder); overrides --models")
    p.add_argument("--embedder", help="minilm (default) | hash")
    p.add_argument("--router", choices=["rule", "model"], help="default: rule")
    p.add_argument("--recall-k", type=int, help="items recalled per question (default 10)")
    p.add_argument("--budget", type=int, help="memory token budget of the answer prompt (default 256)")
    p.add_argument("--no-grammar", action="store_true", help="free decoding for ask/write")
    p.add_argument("--no-dynamics", action="store_true", help="never run maintain() automatically")
    p.add_argument("--threads", type=int, help="llama.cpp / torch threads")
    p.add_argument("--load", help="start from a folder written by /save")
    return p


def main(argv: list[str] | None = None, stdin: TextIO | None = None) -> int:
    """Run the terminal session; returns the exit status."""
    args = _parser().parse_args(argv)
    stdin = stdin or sys.stdin
    from .agent import MAGS
    from .models import ModelNotFoundError

    # only what was given on the command line: a loaded session keeps its saved configuration
    kw = dict(backend=args.backend, models=args.models, trained_tag=args.trained_tag, ask_model=args.ask_model,
              write_model=args.write_model, embedder=args.embedder, router=args.router,
              recall_k=args.recall_k, memory_token_budget=args.budget, n_threads=args.threads)
    kw = {k: v for k, v in kw.items() if v is not None}
    if args.no_grammar:
        kw["grammar"] = False
    if args.no_dynamics:
        kw["dynamics"] = False
    try:
        m = MAGS.load(args.load, **kw) if args.load else MAGS.default(**kw)
    except (ModelNotFoundError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    interactive = stdin.isatty()
    session = ChatSession(m)
    print("MAGS chat: type a statement to store it, a question to ask it; /help for commands.")
    try:
        while True:
            if interactive:
                try:
                    line = input("you> ")
                except EOFError:
                    break
            else:
                line = stdin.readline()
                if not line:
                    break
            if not session.handle(line):
                break
    except KeyboardInterrupt:
        print()
    finally:
        session.m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
