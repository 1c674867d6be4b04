"""A job as it will run on this host: its config checked across groups with its engine,
fingerprints and planned launch; leases of ports, GPUs and cores; the software stack;
machine telemetry."""
