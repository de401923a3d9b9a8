"""A run, in three rooms: ``plans`` (a config turned once into a typed plan: the schema, YAML files and
overrides, the checks, the keys that fit some data only, the networks a plan builds), ``storage``
(what a run keeps: its directory, checkpoints, files written whole, fitted posteriors, loading a
trained run, shipped posteriors made portable, the networks trusted by name) and ``training`` (the
phases and the one loop that trains them, on one process or several ranks, the CPU threads, the
compile cache, the cost, resuming). Imports flow one way: ``plans`` imports neither other room;
``storage`` imports ``plans``, never ``training``; ``training`` imports both.
"""
