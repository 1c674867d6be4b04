"""How MLflow's web UI presents specexp's experiment: its kind, its description (with the
history's section), and the runs-table views saved under it."""

from __future__ import annotations

import json
from typing import Sequence

from specexp.analysis.results import Metric as ResultMetric
from specexp.analysis.results import Tag

# How MLflow 3's web UI presents an experiment (it infers a kind when the tag is absent, and
# benchmark runs without models look like GenAI development to it): model development opens
# the runs table.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
# A run's or experiment's description, in markdown.
NOTE = "mlflow.note.content"


# The experiment description's section that `python -m specexp.history --describe` rewrites.
HISTORY_HEADING = "\n\n## History (`python -m specexp.history`)\n\n"
# Runs-table views the UI lists by name and opens from a link (?viewStateShareKey=ID): the
# columns, filter and order of its "save & share view", one experiment tag each.
VIEW_PREFIX = "mlflow.sharedViewState."
BENCHMARK_VIEW = "specexp-benchmark"
# The figures a benchmark user reads first, after the configuration.
RESULT_COLUMNS = [
    f"metrics.`{ResultMetric.tok_per_s_mean}`",
    f"metrics.`{ResultMetric.tok_per_s}_ci_low`",
    f"metrics.`{ResultMetric.tok_per_s}_ci_high`",
    f"tags.`{Tag.verdict}`",
    f"tags.`{Tag.engaged}`",
    f"metrics.`{ResultMetric.speedup_pct}`",
    f"metrics.`{ResultMetric.speedup_ci_low_pct}`",
    f"metrics.`{ResultMetric.speedup_ci_high_pct}`",
    "metrics.`acceptance_rate_mean`",
]
CONFIGURATION_TAGS = [
    Tag.engine,
    Tag.stack,
    Tag.model,
    Tag.speculative,
    Tag.attention_backend,
    Tag.allreduce_backend,
    Tag.concurrency,
    Tag.workload,
]


def view_state(columns: Sequence[str], search_filter: str = "", order_by: str = "") -> str:
    """A runs-table view as the web UI saves one (its search facets and UI state, every
    field present: the UI takes a shared state whole): ``columns`` shown in that order,
    newest first, or ``order_by`` descending (the UI then lists the runs flat, children
    without their parents)."""
    state = {
        "searchFilter": search_filter,
        "orderByKey": order_by or "attributes.start_time",
        "orderByAsc": False,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "datasetsFilter": [],
        "modelVersionFilter": "All Runs",
        "selectedColumns": list(columns),
        "columnOrder": list(columns),
        "columnWidths": {},
        "runsExpanded": {},
        "runsPinned": [],
        "runsHidden": [],
        "runsVisibilityMap": {},
        "runsHiddenMode": "SHOW_ALL",
        "viewMaximized": False,
        "runListHidden": False,
        "isAccordionReordered": False,
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        "groupBy": None,
        "groupsExpanded": {},
        "autoRefreshEnabled": False,
        "globalLineChartConfig": {
            "xAxisKey": "step",
            "lineSmoothness": 0,
            "selectedXAxisMetricKey": "",
        },
    }
    return json.dumps(state)
