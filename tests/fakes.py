"""A fake language model for agent tests: replies from a table keyed by text found in the prompt.

Shared by the agent, ``observe_many`` and memory tests, so every test drives the same double:
a reply depends only on the prompt's last message (never on call order or batching), and every
call is recorded (prompt, content, grammar, stop) with the size of each batch.
"""

from __future__ import annotations

from mags_lib.backends import Backend, Generation


class TableBackend(Backend):
    """Replies with ``table[key]`` for the longest key found in the prompt's last message
    (``default`` when none is); raises ``fail`` (a RuntimeError by default) on a prompt holding
    ``fail_on``."""

    name = "table"
    supports_grammar = True

    def __init__(self, table: dict[str, str], default: str = "", fail_on: str | None = None,
                 fail: Exception | None = None):
        super().__init__()
        self.model_path = "table"
        self.table, self.default, self.fail_on, self.fail = dict(table), default, fail_on, fail
        self.calls: list[dict] = []
        self.batches: list[int] = []

    def _generate(self, prompts, *, max_new_tokens, temperature, grammar, stop, seed):
        self.batches.append(len(prompts))
        out = []
        for prompt in prompts:
            content = prompt if isinstance(prompt, str) else prompt[-1]["content"]
            if self.fail_on is not None and self.fail_on in content:
                raise self.fail or RuntimeError("the write model crashed")
            keys = [k for k in self.table if k in content]
            reply = self.table[max(keys, key=len)] if keys else self.default
            self.calls.append({"prompt": prompt, "content": content, "grammar": grammar, "stop": stop})
            out.append(Generation(reply, len(content.split()), len(reply.split()), 0.0))
        return out

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def render(self, messages) -> str:
        return "\n".join(m["content"] for m in messages)

    def _release(self) -> None:
        pass


def make_tiny_llama(folder, **config):
    """A 2-layer Llama with SmolLM2's tokenizer and chat template, random weights (seed 0), saved to
    ``folder``: seconds to train, the real tokenization. ``config`` overrides its ``LlamaConfig`` fields
    (e.g. ``hidden_size=256`` for rows that fit llama.cpp's 256-wide K-quant blocks)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from mags_lib.models import base_model_dir

    torch.manual_seed(0)
    fields = {"vocab_size": 49152, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
              "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    cfg = LlamaConfig(**{**fields, **config})
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = 2
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(base_model_dir())).save_pretrained(str(folder))
    return folder
