"""The config room: every key's type and default (``schema``), YAML recipes and dotted overrides
(``config``), the checks a config passes before anything runs (``checks``, ``layout``), the keys that
fit some data only (``data_keys``), the typed plan made once at a command's boundary (``plan``) and the
model, guide and twin it describes (``factory``). It imports from the layers below ``runs`` only
(core, data, abstain, posterior), never from ``runs.storage`` or ``runs.training``.
"""
