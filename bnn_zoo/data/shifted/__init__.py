"""Inputs unlike the training set's, made on purpose: out-of-distribution sets (``ood_sets``:
notMNIST, FashionMNIST, noise, and near ones built from digits and fonts), MNIST-C's corruptions
(``corruptions``), the declared augmentation training reads (``augment``) and the declared outliers
it observes as no class (``outliers``). It imports the data
readers around it (``bnn_zoo.data``'s modules); they never import it.
"""
