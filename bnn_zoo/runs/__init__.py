"""A run: its config (``config``, checked by ``checks``), the networks it describes (``factory``),
the phases and the one loop that trains them (``phases``, ``loop``) on one process or several
(``ranks``), its directory and checkpoints (``run_dir``, ``checkpoint``, ``files``), resuming it,
loading a trained one (``trained``), and the networks by name trusted to be built (``trust_list``).
"""
