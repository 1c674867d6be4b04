"""Pure results: the results contract (tags, metrics, records), a job's summary, arms and their
comparisons, drift, reproduction, the crossover, and the sweep report as one value. No I/O."""
