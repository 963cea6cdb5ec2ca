"""Audit of the memory modes' internals (``MAGSConfig.memory``): what each mode puts in the reader's prompt,
within which window, and what it reports. Fake backends (tests/fakes.py: a token is a word) and the hash
embedder only."""

from __future__ import annotations

from fakes import TableBackend

from mags_lib import MAGS
from mags_lib import protocol as P
from mags_lib.agent import MAGSConfig
from mags_lib.embed import HashEmbedder

EMB = HashEmbedder(dim=32)
ROLES = ("ask", "write", "answer", "router")


class WindowBackend(TableBackend):
    """A table backend with a context window: a prompt that, with its ``max_new_tokens``, does not fit
    ``n_ctx`` raises, as llama.cpp's does (a token is a word)."""

    def __init__(self, n_ctx: int, **kw):
        super().__init__({}, default="An answer.", **kw)
        self.n_ctx = n_ctx
        self.sizes: list[int] = []

    def _generate(self, prompts, *, max_new_tokens, temperature, grammar, stop, seed):
        for p in prompts:
            n = self.count_tokens(self.render(p) if not isinstance(p, str) else p)
            self.sizes.append(n)
            if n + max_new_tokens > self.n_ctx:
                raise ValueError(f"prompt of {n} tokens does not fit the context window n_ctx={self.n_ctx}")
        return super()._generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                                 grammar=grammar, stop=stop, seed=seed)


def _agent(backend, **cfg) -> MAGS:
    return MAGS(MAGSConfig(embedder="hash", memory="full_context", maintain_every=0, **cfg), embedder=EMB,
                backends={r: backend for r in ROLES})


def test_full_context_keeps_an_unbroken_run_of_the_newest_observations():
    """A turn too long for what is left of the window ends the history: no shorter, older turn is packed in
    past the gap (the full context was the newest turns plus random short old ones: LoCoMo conv-50 kept 35
    turns, one of them from session 4, with 500 newer turns left out)."""
    m = _agent(TableBackend({}, default="ok"), n_ctx=256 + 48 + 30, memory_token_budget=16,
               max_new_tokens_ask=16, max_new_tokens_write=16)
    turns = ["Old one.", "Old two.", "Old three.",
             "This middle turn is rather long and has many many words in it ok.",
             "New one here.", "New two here.", "Newest fact: blorps eat lemons."]
    for i, t in enumerate(turns):
        m.observe(t, source=f"T{i}", time=f"2023-05-0{i + 1}")
    a = m.ask("What do blorps eat?")
    order = [f"T{i}" for i in range(len(turns))]
    assert a.sources, a.facts
    assert a.sources == order[len(order) - len(a.sources):], a.sources  # a suffix: the newest, no gap
    assert a.facts[-1] == "(2023-05-07) Newest fact: blorps eat lemons."
    assert a.memory_tokens == m.backend("answer").count_tokens(P.format_facts(a.facts))


def _fill(m: MAGS, n: int = 200) -> None:
    for i in range(n):
        m.observe(f"On day {i} blorp {i} ate {i} frozen lemons near the Teal Bridge.", source=f"T{i}")


def test_full_context_fits_the_answer_backends_own_window():
    """The room is the loaded reader's window, not ``config.n_ctx``: a backend with a smaller window
    (``backend_kwargs={"n_ctx": 1024}`` or a backend passed in) got a prompt it could not hold, and the ask
    failed (llama.cpp: "prompt of 1797 tokens does not fit the context window n_ctx=1024")."""
    b = WindowBackend(n_ctx=700)
    m = _agent(b)  # config n_ctx 2048
    _fill(m)
    a = m.ask("What do blorps eat?")  # raised before
    assert b.sizes[-1] + m.prompt_spec("answer").max_new_tokens <= 700
    assert a.facts and a.sources[-1] == "T199"


def test_full_context_uses_a_larger_backend_window():
    """... and a reader loaded with a larger window than ``config.n_ctx`` gets the history that fits it."""
    b = WindowBackend(n_ctx=4096)
    m = _agent(b)
    _fill(m, 400)
    a = m.ask("What do blorps eat?")
    assert a.memory_tokens > 2048  # more than config.n_ctx could ever hold
    assert b.sizes[-1] + m.prompt_spec("answer").max_new_tokens <= 4096


def test_reading_the_full_context_is_the_recall_steps_time_not_the_answer_models(monkeypatch):
    """``Answer.timings``: building the memory block (for ``full_context`` reading and tokenizing the whole
    history) was counted as the answer model's time, and full context's ``recall`` step was always 0."""
    import time

    m = _agent(TableBackend({}, default="ok"))
    _fill(m, 5)
    slow = m._full_context

    def full_context(question):
        time.sleep(0.3)
        return slow(question)

    monkeypatch.setattr(m, "_full_context", full_context)
    a = m.ask("What do blorps eat?")
    assert a.timings["recall"] >= 0.3 and a.timings["answer"] < 0.3, a.timings


def test_full_context_leaves_no_more_of_the_window_than_a_turn_unused():
    """The room was the window less a fixed 256-token prompt allowance: the reader's real prompt is far
    shorter (57 tokens of SmolLM2's template and system prompt), so about 200 tokens of the window went unused.
    Now the rendered prompt itself is counted: what is left is less than the next turn's line."""
    b = WindowBackend(n_ctx=700)
    m = _agent(b)
    _fill(m)
    m.ask("What do blorps eat?")
    unused = 700 - (b.sizes[-1] + m.prompt_spec("answer").max_new_tokens)
    line = b.count_tokens("199. (no time) On day 150 blorp 150 ate 150 frozen lemons near the Teal Bridge.")
    assert 0 <= unused <= line + 8, unused
