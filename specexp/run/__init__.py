"""One job end to end: measuring a server, the tracked run, the job session; launchers beyond
one process."""
