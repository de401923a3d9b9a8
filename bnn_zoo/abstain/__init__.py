"""Saying "I don't know", with guarantees: the abstention rule and its uncertainty signals
(``rule``), the rule certified on validation data to keep errors among the answers under a risk
(``certify``), conformal prediction sets, the feature density, temperature scaling, detection and
calibration metrics, and an alarm for inputs that stop looking like the validation inputs
(``shift``).
"""
