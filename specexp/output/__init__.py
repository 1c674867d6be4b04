"""Renderers of the analysis values: the terminal, markdown (MLflow descriptions and
artifacts), plots. They compute nothing."""
