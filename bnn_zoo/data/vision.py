"""torchvision as bnn-zoo imports it, in one place: where it was built for another torch than the one
installed (``operator torchvision::nms does not exist`` as it registers its operators), an
``InstallError`` in one line that names both versions and the command that installs a matching pair,
not torchvision's traceback. torchmetrics imports torchvision wherever it is installed, so
``bnn_zoo.abstain.metrics`` imports this module before it; MNIST's download (``bnn_zoo.data.sets``) too.

Usage: ``from bnn_zoo.data.vision import torchvision  # the module, or an InstallError``
"""
from __future__ import annotations

import re
from importlib.metadata import version

import torch

from ..core.errors import InstallError

# PyTorch's own package index, a folder per build (cpu, cu126, rocm6.3): the torchvision of a build
# that is not PyPI's default comes from there
INDEX = "https://download.pytorch.org/whl/"


def matching_install(torch_version: str) -> str:
    """The pip command that installs the torchvision built for ``torch_version`` beside it (torch
    2.N pairs with torchvision 0.(N + 15), from the index of its build), or both anew where the pair is
    not known."""
    found = re.fullmatch(r"2\.(\d+)\.(\d+)(?:\+(cpu|cu\d+|rocm[\d.]+|xpu))?", torch_version)  # a build of PyTorch's
    if found is None:
        return "pip install --upgrade torch torchvision"
    minor, patch, build = found.groups()
    index = f" --index-url {INDEX}{build}" if build else ""
    return f'pip install torch==2.{minor}.{patch} "torchvision==0.{int(minor) + 15}.*"{index}'


def mismatch(torch_version: str, torchvision_version: str, why: str) -> str:
    """The line said where torchvision (``torchvision_version``) fails to import beside torch
    (``torch_version``) with ``why``."""
    command, anew = matching_install(torch_version), "pip install --upgrade torch torchvision"
    return (f"torchvision {torchvision_version} does not work with torch {torch_version}, it was built for "
            f"another torch ({why}): install " + (f"the torchvision of this torch, {command} (or both anew: {anew})"
                                                  if command != anew else f"both anew, {anew}"))


def _imported():
    try:
        import torchvision as found
    except RuntimeError as err:  # its compiled operators do not fit this torch
        why = str(err).strip().splitlines()[-1][:120] if str(err).strip() else type(err).__name__
        raise InstallError(mismatch(torch.__version__, version("torchvision"), why)) from None
    return found


torchvision = _imported()
