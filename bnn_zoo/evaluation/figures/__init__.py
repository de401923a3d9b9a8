"""The figures of a run drawn as pictures and reports: training curves, reliability and
risk-coverage plots (``plots``), the toy curve's posterior (``toy_plot``) and the notMNIST and noise
rejection reports (``rejection``). It imports the evaluation around it (``bnn_zoo.evaluation``'s
modules); they never import it.
"""
