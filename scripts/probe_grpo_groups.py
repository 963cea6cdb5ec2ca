"""Which way would GRPO push a trained writer's number of stated triplets? (a research probe, README)

Samples groups of completions from a write-role adapter (a GGUF LoRA on llama.cpp, as the evaluation
serves it) the way GRPO does (``--temperature``, ``--group`` completions per prompt, each its own seed),
scores them with the default profile's rewards (and exact-triplet F1 alone, and with ``score="min"``) and
prints :func:`mags_lib.rewards.group_push` of the number of operations: positive means GRPO's advantages
favour completions that state more triplets than their group's mean.

    .venv/bin/python scripts/probe_grpo_groups.py RUN/eval/sft/lora.gguf                # 40 random multi-fact rows
    .venv/bin/python scripts/probe_grpo_groups.py RUN/eval/sft/lora.gguf --prompts RUN/models/write/TAG/grpo_prompts.json

Needs the processed default data (notebook 10) and the embedded base model.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from mags_lib import protocol
from mags_lib.backends import load_backend
from mags_lib.data import load_processed
from mags_lib.rewards import get_reward, group_push
from mags_lib.roles import ROLE_SPECS
from mags_lib.training.config import profile_config
from mags_lib.training.run import grpo_rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lora", help="the write adapter as a GGUF LoRA (evaluate_run writes <out>/<stage>/lora.gguf)")
    ap.add_argument("--prompts", help="a GRPO run's grpo_prompts.json (its selected prompts) instead of random rows")
    ap.add_argument("--n", type=int, default=40, help="random generated training rows with >= 2 gold triplets")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write the groups (completions' op counts and rewards) to this JSON file")
    a = ap.parse_args(argv)
    gen = load_processed("gen_write")["train"]
    if a.prompts:
        pool = {r["id"]: r for r in gen}
        try:
            pool |= {r["id"]: r for r in load_processed("seed_write")["train"]}
        except FileNotFoundError:
            pass
        ids = json.loads(Path(a.prompts).read_text())["ids"]
        missing = [i for i in ids if i not in pool]
        if missing:
            raise SystemExit(f"{len(missing)} prompts of {a.prompts} are not in data/processed (e.g. {missing[0]}): "
                             "run notebook 10 with the same data first")
        rows = [pool[i] for i in ids]
    else:
        rng = np.random.default_rng(1)
        rows = [gen[int(i)] for i in rng.choice(len(gen), min(len(gen), 10 * a.n), replace=False)]
        rows = [r for r in rows if r["n_ops"] >= 2][:a.n]
    g = profile_config("write", "default").grpo
    # each scorer: (weight, reward) pairs summed, as TRL sums reward_weights x rewards
    scorers = {"profile rewards": [(w, get_reward(n, **g.reward_options.get(n, {}))) for n, w in g.rewards.items()],
               "exact_f1 alone": [(1.0, get_reward("exact_f1"))],
               "exact_f1, score=min": [(1.0, get_reward("exact_f1", score="min"))]}
    groups = []
    with load_backend("llamacpp", a.lora, n_threads=a.threads) as b:
        for k, (r, ex) in enumerate(zip(tqdm(rows, desc="groups"), grpo_rows(rows, ROLE_SPECS["write"].trained))):
            texts = [b.generate([ex["prompt"]], max_new_tokens=g.max_completion_length, temperature=a.temperature,
                                seed=1000 * k + j)[0].text for j in range(a.group)]
            n_ops = [len(protocol.parse(t, role="write", mode="lenient").ops) for t in texts]
            gold = [ex["response"]] * len(texts)
            rew = {name: np.sum([w * np.asarray(fn(texts, response=gold, role="write")) for w, fn in parts],
                                axis=0).tolist() for name, parts in scorers.items()}
            groups.append({"id": r["id"], "kind": r["kind"], "gold_ops": r["n_ops"], "n_ops": n_ops, "rewards": rew})
    print(f"{len(groups)} groups of {a.group} at temperature {a.temperature}: ops per completion "
          f"{np.mean([np.mean(x['n_ops']) for x in groups]):.2f}, gold {np.mean([x['gold_ops'] for x in groups]):.2f}; "
          f"completions with fewer ops than the gold {np.mean([n < x['gold_ops'] for x in groups for n in x['n_ops']]):.3f}, "
          f"more {np.mean([n > x['gold_ops'] for x in groups for n in x['n_ops']]):.3f}")
    for name in scorers:
        push, n = group_push([x["rewards"][name] for x in groups], [x["n_ops"] for x in groups])
        print(f"  {name}: push on the number of ops {push:+.4f} ({n} groups with reward variance)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(groups, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
