"""The out-of-distribution scoreboard of trained runs (scripts/scoreboard.py): each run scored on its
far and near OOD sets and under shift (``scored``), its markdown tables (``tables``) and its
pictures (``plots``). It imports the evaluation around it and its figures; they never import it.
"""
