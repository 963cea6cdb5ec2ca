"""Shared helpers of the tests/test_reliability_*.py files: a scripted backend and a cheap embedder."""

from __future__ import annotations

from mags_lib.agent import MAGS, MAGSConfig
from mags_lib.embed import HashEmbedder

EMB = HashEmbedder(dim=32)


class ScriptedBackend:
    """Answers every write/ask prompt with the next scripted output (the last one repeats)."""

    name = "scripted"
    supports_grammar = True

    def __init__(self, outputs, fail: Exception | None = None):
        self.outputs = list(outputs) or [""]
        self.fail = fail
        self.calls = 0

    def generate(self, prompts, **kw):
        from mags_lib.backends.base import Generation

        if self.fail is not None:
            raise self.fail
        out = []
        for _ in prompts:
            text = self.outputs[min(self.calls, len(self.outputs) - 1)]
            self.calls += 1
            out.append(Generation(text=text, n_prompt_tokens=1, n_new_tokens=1, seconds=0.0))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def close(self) -> None:
        pass


def scripted_agent(outputs, **cfg) -> MAGS:
    b = ScriptedBackend(outputs)
    c = MAGSConfig(embedder="hash", **cfg)
    return MAGS(c, embedder=EMB, backends={r: b for r in ("ask", "write", "answer", "router")})
