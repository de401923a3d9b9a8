"""Measuring the zoo, for the scripts in scripts/: each measurement in a process of its own
(``processes``), what a figure records beside it (``provenance``), the training steps of the zoo
and of its peers timed against one another (``peers``; the peers, TyXe, bayesian-torch and blitz,
are imported only when their step is built: ``pip install -e .[bench]``), and what the GPU check
reads from its processes and reports (``gpu_output``, ``gpu_report``). Nothing below imports it.
"""
