"""Training a run: the phases (``phases``) and the one loop that runs them (``loop``), on one process
or several ranks (``ranks``, ``meeting``), on the CPU threads the work calls for (``threads``), with
compiled steps kept across processes (``compile_cache``), what it costs (``cost``) and how a run
resumes (``resume``). It imports ``runs.plans``, ``runs.storage`` and the layers below.
"""
