"""The command lines, each a ``main(argv)``: ``python -m bnn_zoo.train``, ``predict``, ``evaluate``,
``certify`` (``calibrate``, its old name), ``serve`` and ``trust`` run them through thin entry
modules at the package's top; ``options`` holds what they share.
"""
