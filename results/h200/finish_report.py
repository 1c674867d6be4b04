"""A sweep's report compiled after the fact, with specexp's own report code, from its store
and its jobs' directories: for a sweep whose process was stopped before it wrote its report.
Each job's resolved config.yaml gives its speculative settings and model path; the store
gives its run (run.json) and config fingerprint.

    python results/h200/finish_report.py STORE_URI PARENT_RUN_ID SWEEP_DIR [BASELINE]

The report goes to the parent run (its description and sweep_report artifacts), as the
sweep would have written it, and to the terminal.
"""

import sys
from pathlib import Path

from omegaconf import OmegaConf

from specexp.analysis.report import SweepFacts
from specexp.analysis.results import Tag
from specexp.core.schemas.speculative import SpeculativeConfig
from specexp.core.schemas.stats import StatsConfig
from specexp.sweep.report import sweep_report
from specexp.tracking.store import TrackingStore


def main(uri: str, parent_id: str, sweep_dir: str, baseline: str = "speculative=none") -> None:
    store = TrackingStore(uri, "specexp")
    parent = store.run(parent_id)
    fingerprints = {
        r.run_id: r.tags.get(Tag.config_fingerprint) for r in store.job_runs(parent=parent_id)
    }
    speculative, models, stats = {}, {}, None
    for config in sorted(Path(sweep_dir).glob("*/config.yaml")):
        if not (config.parent / "run.json").is_file():
            continue  # a job stopped before its run ended
        fingerprint = fingerprints.get(str(OmegaConf.load(config.parent / "run.json").run_id))
        if fingerprint is None:
            continue
        cfg = OmegaConf.load(config)
        speculative[fingerprint] = SpeculativeConfig(**OmegaConf.to_container(cfg.speculative))
        models[fingerprint] = str(cfg.model.path)
        stats = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(StatsConfig), cfg.stats))
    assert stats is not None, f"no job of {sweep_dir} has a run in the store"
    facts = SweepFacts(
        parent_run_id=parent_id,
        engine=str(cfg.engine.name),
        order="interleaved (compiled after the sweep was stopped)",
        baseline=baseline,
        crossover_factor=str(cfg.multirun.crossover_factor),
        stats=stats,
        speculative=speculative,
        models=models,
    )
    sweep_report(store, parent, facts)


if __name__ == "__main__":
    main(*sys.argv[1:])
