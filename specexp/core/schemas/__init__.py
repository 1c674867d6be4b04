"""Typed schemas of every config group: the bottom layer, pure data.

The YAML files in ``conf/`` are data; these dataclasses give them types, so a misspelt key,
an unknown choice or a string where a number belongs fails at composition, and a value out
of range fails when the composed config is converted into them (``specexp.hydra_app``,
once per job). Each range check lives in the schema that owns the field; checks that span
groups are the job's (``specexp.host.job``), and what an engine cannot honour is the engine's.
Engines subclass :class:`~specexp.core.schemas.engine.EngineConfig` with their own settings.

One module per config group (``conf/GROUP/`` is typed by ``schemas/GROUP.py``), each name
imported from the module that defines it:

- ``run``: ``RunConfig``, every group assembled (``conf/config.yaml``), and
  ``GROUP_SCHEMAS``, the groups Hydra's ConfigStore gets a schema of (``hydra_app.register``)
- ``engine``: ``EngineConfig``, the fields every engine's settings have, and
  ``ServerSettings``, what an engine is told
- ``stack``: ``StackConfig``
- ``model``: ``ModelConfig``
- ``attention_backend``, ``allreduce_backend``: the backends' enums and configs
- ``speculative``: ``SpeculativeConfig``, ``SpeculativeMethod``, ``NgramVariant``
- ``workload``: ``WorkloadConfig``, ``TraceConfig``, ``PromptReuse``, ``CacheUse``,
  ``PREFIX_WORDS``
- ``concurrency``: ``ConcurrencyConfig``, ``Arrival``, ``CapacitySearchConfig``, and what one
  run sends and how long it takes (``requests_per_stream``, ``run_requests``,
  ``expected_run_seconds``)
- ``slo``: ``SloConfig``
- ``stats``: ``StatsConfig``, ``SequentialConfig``
- ``tracking``: ``TrackingConfig``
- ``host``: ``HostConfig``, ``GpuInterconnect``
- ``multirun``: ``MultirunConfig``, ``JobOrder``
- ``checks``: ``ConfigError``, and the range checks the schemas share
"""
