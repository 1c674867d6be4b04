"""What a person sees in the terminal, one module per report:

- ``screen``: the console every report prints to (and its log files), status, stops;
- ``loggers``: Hydra's job lines and other libraries' log lines;
- ``dry_run``: a dry run's job and command;
- ``progress``: a job's expected duration and the bar of its runs;
- ``job_summary``: a job's summary;
- ``rendering``: the report tables drawn to fit the terminal, which the reports share;
- ``comparison``: a comparison of arms and a reproduction;
- ``sweep_report``: a sweep's report, and its budget before the first launch.
"""
