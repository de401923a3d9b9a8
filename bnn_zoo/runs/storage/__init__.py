"""What a run keeps: files written whole (``files``), checkpoints that rebuild their model
(``checkpoint``), the run directory and its claim (``run_dir``), the posteriors fitted after training
(``fits``), a trained run or shipped posterior loaded (``loading``, ``trained``), shipped files without
this machine's folders (``portable``) and the networks trusted by name (``trust_list``). It imports
``runs.plans`` and the layers below, never ``runs.training``.
"""
