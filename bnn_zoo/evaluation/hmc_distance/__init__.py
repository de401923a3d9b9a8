"""How close each posterior is to HMC's, by the NeurIPS 2021 approximate-inference competition's
metrics (``metrics``): references built from several NUTS chains, with their predictive R-hat and the
chain-to-chain floor (``build``), each chain kept as it ends (``kept``), over inputs each reference
describes (``inputs``), stored in one file without pickle (``reference``, through ``digested``); any predictive, posterior or guide scored against one
(``score``: ``bnn_zoo.against_hmc``), and the ladder's rungs scored against each problem's
(``ladder``, scripts/distance_to_hmc.py). It imports the layers below evaluation; nothing imports it
but the package's names and the scripts.
"""
