"""The game: scenarios whose rules change, the scorer, the generator, operation quality, the runner.

* :mod:`~mags_lib.game.scenario` -- DESIGN.md's scenario format: loader (errors name the file, the
  event and the problem), writer, the examples of ``../shared/scenarios/``;
* :mod:`~mags_lib.game.score` -- the scorer (normalisation, whole-word aliases, abstain phrases);
* :mod:`~mags_lib.game.generate` -- seeded scenarios over the datasets' worlds, disjoint from
  every training split, with ground truth;
* :mod:`~mags_lib.game.quality` -- wrong / missed invalidations, duplicate entities, wrong subjects;
* :mod:`~mags_lib.game.run` -- systems as configurations, ablations, sweeps, the runner, joblib;
* :mod:`~mags_lib.game.report` -- accuracy with bootstrap intervals, curves, tables, figures.

``notebooks/50_game_evaluation.ipynb`` and ``notebooks/60_ablations.ipynb`` call it.

>>> from mags_lib.game import is_correct
>>> is_correct("Under the Teal Bridge.", ["teal bridge"], "multihop")
True
"""

from .generate import (
    FAMILIES,
    GeneratorConfig,
    evaluation_scenarios,
    game_registry,
    generate_scenario,
    generate_scenarios,
    generator_config,
)
from .quality import operation_quality, quality_rates
from .report import (
    accuracy_table,
    by_changes,
    by_distance,
    difference_table,
    growth_table,
    latency_table,
    plot_accuracy,
    plot_curve,
    plot_growth,
    quality_table,
    summary_metrics,
)
from .run import (
    ABLATIONS,
    SYSTEMS,
    GameResults,
    ablation_systems,
    evaluate_systems,
    make_config,
    profile_base,
    resolve_systems,
    run_scenario,
    sweep_systems,
    system_status,
)
from .scenario import (
    KINDS,
    Event,
    GoldEntity,
    GoldFact,
    Scenario,
    ScenarioError,
    example_scenarios,
    load_scenario,
    load_scenarios,
    save_scenario,
    scenario_from_dict,
)
from .score import ABSTAIN_PHRASES, abstains, is_correct, matched_alias, normalize

__all__ = [
    "ABLATIONS", "ABSTAIN_PHRASES", "FAMILIES", "KINDS", "SYSTEMS", "Event", "GameResults", "GeneratorConfig",
    "GoldEntity", "GoldFact", "Scenario", "ScenarioError", "ablation_systems", "abstains", "accuracy_table",
    "by_changes", "by_distance", "difference_table", "evaluate_systems", "evaluation_scenarios", "example_scenarios", "game_registry",
    "generate_scenario", "generate_scenarios", "generator_config", "growth_table", "is_correct", "latency_table",
    "load_scenario", "load_scenarios", "make_config", "matched_alias", "normalize", "operation_quality",
    "plot_accuracy", "plot_curve", "plot_growth", "profile_base", "quality_rates", "quality_table", "resolve_systems",
    "run_scenario", "save_scenario", "scenario_from_dict", "summary_metrics", "sweep_systems", "system_status",
]
