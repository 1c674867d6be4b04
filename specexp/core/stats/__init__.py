"""The statistics specexp trusts, small and explicit, one module per question:

* :mod:`~specexp.core.stats.summaries` - one configuration: mean, std, CV and a Student-t
  interval; launch and run variance; warnings when the values cannot be trusted (high CV,
  a trend left in the measured runs, outliers).
* :mod:`~specexp.core.stats.tails` - latency percentiles (p50 to p99) with
  distribution-free intervals on the effective number of values.
* :mod:`~specexp.core.stats.verdicts` - what a comparison says (faster / slower /
  equivalent / inconclusive / cannot test), Welch's t on logs, the interval of a log ratio
  and the verdict read off it.
* :mod:`~specexp.core.stats.comparison` - two configurations: the ratio of geometric means,
  its tests, and the verdicts of a family of comparisons (Bonferroni), with drift or a step
  taken out where the arms shared a timeline.
* :mod:`~specexp.core.stats.drift` - timelines: a common trend in time (ANCOVA on logs),
  a step, and autocorrelated residuals.
* :mod:`~specexp.core.stats.planning` - runs per arm needed for an effect, the minimum
  detectable effect of the runs made, and launches x runs plans, from the measured CV.
* :mod:`~specexp.core.stats.distributions` - the quantiles they all ask for, fast.

Values passed in must be independent: per launch when a configuration had several server
launches, per measured run otherwise (requests inside one run are not independent).
"""
