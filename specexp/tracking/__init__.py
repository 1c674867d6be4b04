"""MLflow: the store, a run's log and its offline journal, reading runs back, and writing
report values to runs."""
