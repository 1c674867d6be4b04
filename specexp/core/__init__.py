"""Data: the typed config groups (schemas), per-request and per-run measurements, the
statistics, generated model pairs, redaction. Nothing here knows of engines or processes."""
