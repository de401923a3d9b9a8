"""The fast training step: ``captured_step`` (the step captured whole: compiled, in a CUDA graph),
``compiling`` (torch.compile's settings and guards), ``adam_in_graph`` (Adam's update inside the
captured graph) and ``ordered_draws`` (weight draws kept in Pyro's order). It imports ``core.errors``
only.
"""
