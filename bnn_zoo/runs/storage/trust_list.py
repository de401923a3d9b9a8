"""Which networks by name (``arch: package.module:factory``, with its ``model.kwargs``) this user
lets a stored config build. Building one imports its module and calls the factory with those
arguments, which runs code, and a checkpoint is data: so a network a checkpoint names is built only
once that name with those arguments is trusted here. Training with them (the user gave them)
trusts them, once the network was built and the run started; ones from elsewhere are trusted by
``python -m bnn_zoo.trust NAME [--kwargs JSON]``. A trusted name is not a trusted file: a stored
run's module is whatever NAME imports from installed packages and PYTHONPATH, never from the
folder you stand in (``bnn_zoo.core.networks.network_names``). The list is a file, one JSON entry a line, in
``$BNN_ZOO_HOME`` (default ``~/.config/bnn_zoo``), refused where others may write it, and
changed under a lock, so that trusting two names at once keeps both.

Usage: ``trust("mynets:small_cnn", {"width": 16}); check_trusted(config, "runs/x/checkpoint.pt")``
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Callable, Iterator

from ...core.errors import CheckpointError, ConfigError, StorageError
from ...core.networks.network_names import check_network_name
from .files import make_folder, open_lock, write_atomic

HOME_ENV = "BNN_ZOO_HOME"


def trust_file() -> Path:
    """Where the trusted networks are listed."""
    home = os.environ.get(HOME_ENV)
    if not home:
        try:
            home = Path.home() / ".config" / "bnn_zoo"
        except RuntimeError:
            raise ConfigError(f"no home folder to keep the trusted networks in: set {HOME_ENV}=DIR") from None
    return Path(home) / "trusted_networks"


def _entry(arch: str, kwargs: dict) -> str:
    return json.dumps({"arch": arch, "kwargs": kwargs}, sort_keys=True)


def trusted() -> list[str]:
    """The trusted entries; a list others may write is refused, as ssh refuses its keys."""
    path = trust_file()
    for place in (path.parent, path):
        if place.exists():
            info = place.stat()
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise CheckpointError(f"{place} is not yours alone to write: make it so (chmod go-w {place}) "
                                      "before bnn-zoo trusts the networks it lists")
    try:
        return path.read_bytes().decode("utf-8").splitlines() if path.is_file() else []
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path} is not a list bnn-zoo wrote (byte {err.start} is not UTF-8): delete it and "
                              "trust your networks again (python -m bnn_zoo.trust NAME)") from None
    except OSError as err:
        raise StorageError(f"cannot read {path} ({err.strerror or type(err).__name__})") from None


def trust(arch: str, kwargs: dict) -> None:
    """Trust the network by name ``arch`` built with ``kwargs`` (kept once)."""
    try:
        check_network_name(arch)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    with _changing():
        entries, entry = trusted(), _entry(arch, kwargs)
        if entry not in entries:
            write_atomic(trust_file(), "\n".join([*entries, entry]) + "\n")


@contextlib.contextmanager
def _changing() -> Iterator[None]:
    """The list's folder made (yours alone, whatever the umask) and held by this process alone."""
    folder = trust_file().parent
    if not folder.exists():
        make_folder(folder)
        folder.chmod(0o700)  # made here: not group-writable under umask 002, or trusted() would refuse it
    with open_lock(folder / ".trusted_networks.lock") as lock:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks
            fcntl = None
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another trust call waits: both entries are kept
        yield


def trust_given(arch: str, kwargs: dict, log: Callable[[str], None]) -> None:
    """What training does with the network it was given: trust it (nothing for a registered recipe),
    or say why it could not, without stopping."""
    if ":" in arch:
        try:
            trust(arch, kwargs)
        except (ConfigError, CheckpointError, StorageError) as err:
            log(f"warning: {arch} is not recorded as trusted ({err}); loading its runs will ask for it")


def check_trusted(config: dict, source: str | Path) -> None:
    """Refuse a stored config (from ``source``) with an interpolation (bnn-zoo stores configs
    resolved: one is an edit), naming what is no network by name, or naming a network by name with
    arguments not trusted here."""
    def strings(value):
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, (list, tuple)):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    if any("${" in s for s in strings(config)):
        raise CheckpointError(f"{source} holds a config with an interpolation (${{...}}), which bnn-zoo never "
                              "writes: the file was edited; use the run it came from")
    arch = str(config.get("arch"))
    if ":" not in arch:
        return
    try:
        check_network_name(arch)
    except ValueError as err:  # never trusted, so never stored by bnn-zoo: a forged or edited file
        raise CheckpointError(f"{source} names {arch}, which is no network ({err}); bnn-zoo never stores such a "
                              "name: the file was forged or edited; use the run it came from") from None
    kwargs = (config.get("model") or {}).get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise CheckpointError(f"{source} holds model.kwargs {kwargs!r}, not a mapping of keyword arguments: the file "
                              "was edited; use the run it came from")
    if _entry(arch, kwargs) not in trusted():
        given = f" --kwargs '{json.dumps(kwargs, sort_keys=True)}'" if kwargs else ""
        raise CheckpointError(f"{source} names the network {arch} (kwargs {kwargs}), which runs code when it is "
                              f"built; if you trust it: python -m bnn_zoo.trust {arch}{given}")
