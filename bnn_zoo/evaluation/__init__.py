"""A trained run's figures: ``evaluate`` (accuracy, refusals, sets, OOD detection for every
posterior), their dataclasses (``results``), what is fitted on the run's own splits first
(``split_fits``), the rejection reports and every plot.
"""
