"""Datasets for the ask, write and answer models: procedural worlds, the seed importer, storage.

* :mod:`~mags_lib.data.worlds` -- seeded invented worlds (entities, facts);
* :mod:`~mags_lib.data.templates` -- sentence templates per relation and role;
* :mod:`~mags_lib.data.render` -- worlds -> ask / write examples, split by world;
* :mod:`~mags_lib.data.answer` -- worlds -> answer (reader) examples: question + recalled items;
* :mod:`~mags_lib.data.seed_import` -- the seed project's ``seed_syn_dual`` datasets;
* :mod:`~mags_lib.data.store` -- ``data/processed/<name>/`` with a card;
* :mod:`~mags_lib.data.stats` -- statistics and distinct-n diversity.

:func:`build_all` does all of it for a profile; ``notebooks/10_generate_datasets.ipynb`` calls it.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from .answer import ANSWER_KINDS, render_answer
from .render import ASK_KINDS, ROLES, SPLITS, WRITE_KINDS, GenerationConfig, generate_role_splits, render_example
from .seed_import import DEFAULT_SEED_PATH, SeedImport, import_seed, resolve_seed_path, split_of
from .stats import (
    dataset_stats,
    distinct_ngram_ratio,
    diversity_table,
    plot_input_lengths,
    plot_ops,
    samples_by_kind,
    samples_table,
    seed_failures_table,
    split_stats,
    stats_table,
)
from .store import content_hash, dataset_name, load_card, load_processed, processed_root, save_dataset
from .worlds import GENERATOR_VERSION, NameRegistry, World, WorldConfig, generate_world, generate_worlds

__all__ = [
    "ANSWER_KINDS",
    "ASK_KINDS",
    "DEFAULT_SEED_PATH",
    "GENERATOR_VERSION",
    "ROLES",
    "SPLITS",
    "WRITE_KINDS",
    "GenerationConfig",
    "NameRegistry",
    "SeedImport",
    "World",
    "WorldConfig",
    "build_all",
    "content_hash",
    "dataset_name",
    "dataset_stats",
    "distinct_ngram_ratio",
    "diversity_table",
    "generate_role_splits",
    "generate_world",
    "generate_worlds",
    "import_seed",
    "generation_config",
    "generation_from_card",
    "load_card",
    "load_processed",
    "name_words",
    "plot_input_lengths",
    "plot_ops",
    "processed_root",
    "profile_config",
    "render_answer",
    "render_example",
    "resolve_seed_path",
    "samples_by_kind",
    "samples_table",
    "seed_failures_table",
    "save_dataset",
    "seed_skip_message",
    "split_of",
    "split_stats",
    "stats_table",
]

_PROFILES = {
    "smoke": {"n_train": 200, "n_validation": 40, "n_test": 40, "worlds_train": 20, "worlds_validation": 5, "worlds_test": 5},
    "default": {"n_train": 5000, "n_validation": 500, "n_test": 500, "worlds_train": 300, "worlds_validation": 40,
                    "worlds_test": 40},
    "full": {"n_train": 20000, "n_validation": 2000, "n_test": 2000, "worlds_train": 1200, "worlds_validation": 150,
                 "worlds_test": 150},
}


def profile_config(profile: str = "default", seed: int = 0, **overrides) -> GenerationConfig:
    """The :class:`GenerationConfig` of a profile (``smoke`` | ``default`` | ``full``), with overrides."""
    if profile not in _PROFILES:
        raise ValueError(f"unknown profile {profile!r}: use one of {sorted(_PROFILES)}")
    return replace(GenerationConfig(**_PROFILES[profile], seed=seed), **overrides)


def generation_config(role: str, profile: str = "default", *, root: str | Path | None = None) -> GenerationConfig:
    """The :class:`GenerationConfig` the processed generated dataset of ``role`` and ``profile`` was built with
    (its card's ``params``: seed, world counts and sizes), so that worlds derived later (the outcome
    objective's training and held-out mini-scenarios) are the dataset's own, whatever seed or overrides
    built it. Raises ``FileNotFoundError`` (saying how to build it) when the dataset does not exist, and
    ``ValueError`` when its card records no generation parameters (a dataset saved by hand)."""
    name = dataset_name("gen", role, profile)
    cfg = generation_from_card(load_card(name, root=root))
    if cfg is None:
        raise ValueError(f"the card of {name} records no generation params (saved without build_all?): rebuild the "
                         "datasets with notebooks/10_generate_datasets.ipynb or mags_lib.data.build_all")
    return cfg


def generation_from_card(card: dict) -> GenerationConfig | None:
    """The :class:`GenerationConfig` recorded in a dataset card's ``params``; ``None`` when it records none."""
    params = dict(card.get("params") or {})
    if not params:
        return None
    world = params.pop("world", None) or {}
    world = WorldConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in world.items()})
    return GenerationConfig(**params, world=world)


def seed_skip_message(seed_path: str | Path | None) -> str | None:
    """``None`` when the seed datasets are at ``seed_path``; else the one line saying they are skipped
    and how to add them (the seed data is an optional input: everything runs on generated data)."""
    if seed_path is None:
        return ("seed datasets skipped (seed_path=None): to add them, pass the path of seed_syn_dual "
                "(holding asks/ and writes/), e.g. -p seed_path=../shared/data/seed_syn_dual")
    folder = resolve_seed_path(seed_path)
    if not folder.is_dir():
        return (f"seed datasets skipped: no folder {folder}. To add them, put the seed project's "
                f"seed_syn_dual there (asks/*.json, writes/*.json) or pass its path as seed_path")
    if not any(any((folder / d).glob("*.json")) for d in ("asks", "writes")):  # checked before anything is saved
        return (f"seed datasets skipped: {folder} holds no asks/*.json or writes/*.json (is it seed_syn_dual?). "
                f"To add them, put the seed project's seed_syn_dual there or pass its path as seed_path")
    return None


def build_all(profile: str = "default", *, seed: int = 0, seed_path: str | Path | None = DEFAULT_SEED_PATH,
              config: GenerationConfig | None = None, root: str | Path | None = None,
              progress: bool = True) -> dict:
    """Generate the procedural datasets, import the seed's when present, save all under ``data/processed/``.

    Parameters
    ----------
    profile : str
        Sizes (see :func:`profile_config`); non-default profiles save under their own names.
    seed : int
    seed_path : path or None
        The seed's ``seed_syn_dual`` folder (optional input). ``None`` or a folder that does not
        exist skips the import; the reason and how to add the data are in ``result["seed_skipped"]``.
    config : GenerationConfig, optional
        Overrides the profile's configuration.
    root : path, optional
        Project root for ``data/processed``.

    Returns
    -------
    dict
        ``{"paths": {name: Path}, "rows": {name: {split: rows}}, "worlds": {split: [World]},
        "seed_import": SeedImport | None, "seed_skipped": str | None, "config": GenerationConfig,
        "mask": set}``
    """
    if profile not in _PROFILES:  # names the saved datasets, with or without a config
        raise ValueError(f"unknown profile {profile!r}: use one of {sorted(_PROFILES)}")
    if config is not None and seed != 0 and seed != config.seed:
        raise ValueError(f"seed={seed} and config.seed={config.seed} disagree: the config's seed builds the data, "
                         "so pass the seed in the config (profile_config(profile, seed=...)) and leave seed out")
    cfg = config or profile_config(profile, seed=seed)
    rows, worlds = generate_role_splits(cfg, progress=progress)
    mask = {w for ws in worlds.values() for world in ws for w in name_words(world)}
    params = asdict(cfg)
    skipped = seed_skip_message(seed_path)
    out: dict = {"paths": {}, "rows": {}, "worlds": worlds, "seed_import": None, "seed_skipped": skipped,
                 "config": cfg, "mask": mask}
    for role in cfg.roles:
        name = dataset_name("gen", role, profile)
        out["rows"][name] = rows[role]
        what = "answer (reader)" if role == "answer" else role
        out["paths"][name] = save_dataset(
            rows[role], name, source="generated", seed=cfg.seed, generator_version=GENERATOR_VERSION,
            params=params, mask=mask, root=root,
            description=f"Procedurally generated {what} examples (invented worlds, split by world).")
    if skipped is not None:
        # processed seed data of an earlier import would be used by later notebooks although this run
        # had no seed input: it is derived data (re-made from the seed folder), so it goes
        import shutil

        stale = [processed_root(root) / dataset_name("seed", r, profile) for r in ("ask", "write")]
        stale = [p for p in stale if p.exists()]
        for p in stale:
            shutil.rmtree(p)
        if stale:
            out["seed_skipped"] = skipped = skipped + f" (removed the earlier import {', '.join(p.name for p in stale)})"
    if skipped is None:
        imp = import_seed(seed_path)
        out["seed_import"] = imp
        notes = [f"{len(imp.failures)} examples left out (do not parse strictly): {imp.failure_reasons()}",
                 f"{imp.duplicate_inputs} repeated inputs {'dropped' if imp.dedupe else 'kept'}",
                 "split: sha256 of the id, 10 % test"]
        for role in ("ask", "write"):
            name = dataset_name("seed", role, profile)
            out["rows"][name] = imp.rows[role]
            out["paths"][name] = save_dataset(
                imp.rows[role], name, source="seed", seed=0, generator_version=GENERATOR_VERSION,
                params={"path": str(seed_path), "test_fraction": 0.1, "dedupe": imp.dedupe}, notes=notes,
                root=root, description=f"The seed project's {role} examples (seed_syn_dual), parsed.")
    return out


def name_words(world: World) -> set[str]:
    """The invented words of ``world`` (lower case), masked by the template-diversity statistic."""
    words = set()
    for e in world.entities:
        words.add(e.core.lower())
        words.add(e.name.split()[0].lower())
    return words
