"""The local page to draw a digit and watch the posterior answer it or say "I don't know": the
Starlette app (``app``), its answers (``answers``), and what keeps its server to itself (``guard``).
"""
