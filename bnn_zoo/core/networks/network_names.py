"""A network by name (``package.module:factory``) is code: its name is checked before anything is
imported, its module is imported from installed packages and PYTHONPATH (the folder you stand in
only for a run you start yourself, never for a stored run's), and its factory is called under a
guard: while a network is built it may not open a file outside Python's and the installed
packages' folders, write or remove any file, unpickle an object, start a program or open a
connection. A loader named as a network (``torch:load``, ``numpy:load``, ``yaml:unsafe_load``) is
refused before it reads what its arguments name, and so is any factory that does such things.

Usage::

    factory = import_factory("mynets:small_cnn")
    net = build_network("mynets:small_cnn", factory, {"width": 16})
    with imports_beside_you():              # python -m bnn_zoo.train arch=mynets:small_cnn
        ...
"""
from __future__ import annotations

import importlib
import inspect
import os
import site
import sys
import threading
import typing
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

from torch import nn

# Whether a module may come from the folder you stand in: True only inside a run you start yourself.
_BESIDE_YOU: ContextVar[bool] = ContextVar("imports_beside_you", default=False)
_PATH_LOCK = threading.Lock()  # sys.path is the process's: one import without its first entry at a time
_STATE = threading.local()  # the guard's record of what the factory being built did that it may not
PROGRAMS = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile", "os.fork", "os.forkpty",
            "subprocess.Popen", "pty.spawn"}
CONNECTIONS = {"socket.connect", "socket.bind", "socket.sendto", "urllib.Request", "http.client.connect",
               "ftplib.connect", "smtplib.connect", "webbrowser.open"}
FILE_CHANGES = {"os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
                "os.symlink", "os.link", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move",
                "shutil.copytree", "shutil.chown", "shutil.make_archive", "shutil.unpack_archive"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")


def check_network_name(name: str) -> None:
    """ValueError unless ``name`` is ``package.module:factory`` outside Python's own library."""
    module_name, _, attr = name.partition(":")
    parts = module_name.split(".") + attr.split(".")
    if not all(p.isidentifier() for p in parts):
        raise ValueError(f"{name!r} is not package.module:factory (e.g. torchvision.models:resnet18, or "
                         "mynets:small_cnn for a mynets.py beside you)")
    if parts[0] in sys.stdlib_module_names:
        raise ValueError(f"{name}: {parts[0]} is Python's own library, not a network; name a factory of your own")


@contextmanager
def imports_beside_you() -> Iterator[None]:
    """A network by name may come from the folder you stand in (a run you start yourself)."""
    token = _BESIDE_YOU.set(True)
    try:
        yield
    finally:
        _BESIDE_YOU.reset(token)


def import_factory(name: str) -> Callable[..., nn.Module]:
    """The callable ``package.module:factory`` names. Its module is imported (and so runs, as any
    import does), from the folder you stand in only inside ``imports_beside_you``; Python's own
    modules, and whatever reaches another module or is no network, are refused."""
    check_network_name(name)
    module_name, _, attr = name.partition(":")
    try:
        module = _import(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import {module_name} ({err}); " + (
            "install it, or run from the folder that holds it (or add that folder to PYTHONPATH)" if _BESIDE_YOU.get()
            else "a stored run's network comes from installed packages or PYTHONPATH, never from the folder you "
                 "stand in: install it, import it yourself first, or add its folder to PYTHONPATH")) from None
    except Exception as err:  # the module's own code failed: a SyntaxError, an error at its import
        raise ValueError(f"importing {module_name} failed: {type(err).__name__}: {err}") from None
    factory = module
    for step in attr.split("."):
        factory = getattr(factory, step, None)
        if factory is None:
            raise ValueError(f"{module_name} has no {attr}")
        if inspect.ismodule(factory):  # torch:os.system reaches another module through this one
            raise ValueError(f"{name} passes through the module {factory.__name__}: name the factory in its own module")
    if not callable(factory):
        raise ValueError(f"{name} is a {type(factory).__name__}, not a callable that returns a network")
    home = str(getattr(factory, "__module__", None) or "").split(".")[0]
    if inspect.isbuiltin(factory) or home in sys.stdlib_module_names:
        raise ValueError(f"{name} is Python's own {getattr(factory, '__name__', 'callable')}, not a network")
    returned = _returns(factory)
    if returned is not None and not issubclass(returned, nn.Module):
        raise ValueError(f"{name} returns a {returned.__name__}, not a network (an nn.Module)")
    return factory


def _import(module_name: str):
    """``import module_name``; outside ``imports_beside_you``, without sys.path's first entry where
    it is the folder you stand in (``python -m`` and ``-c`` put it there)."""
    if module_name in sys.modules or _BESIDE_YOU.get():
        return importlib.import_module(module_name)
    with _PATH_LOCK:
        first = sys.path[0] if sys.path else None
        implicit = first is not None and (first == "" or _same_path(first, os.getcwd()))
        if implicit:
            del sys.path[0]
        try:
            return importlib.import_module(module_name)
        finally:
            if implicit:
                sys.path.insert(0, first)


def _same_path(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _returns(factory) -> type | None:
    """The class a factory says it returns: the class itself, or its return annotation where that
    is a class (None: it does not say)."""
    if inspect.isclass(factory):
        return factory
    try:
        returned = typing.get_type_hints(factory).get("return")
    except Exception:  # an annotation that does not resolve here says nothing
        return None
    return returned if inspect.isclass(returned) and returned not in (object, typing.Any) else None


def build_network(name: str, factory: Callable[..., nn.Module], kwargs: dict) -> nn.Module:
    """``factory(**kwargs)`` under the guard (see the module's docstring), which must be an
    ``nn.Module``; ValueError naming what it did where it did what a network's construction may not."""
    with _guarded() as done:
        try:
            net = factory(**kwargs)
        except Exception as err:
            if not done:
                raise ValueError(f"{name}(**{kwargs}) failed: {type(err).__name__}: {_first_line(err)}") from None
            net = None
    if done:  # even where the factory caught the refusal and went on
        raise ValueError(f"{name}(**{kwargs}) {done[0]} while it is built; a network by name is built from its "
                         "code alone (no file read, program started, connection opened or object unpickled): "
                         "build it in Python and pass it to bnn_zoo.bayesian(net)")
    if not isinstance(net, nn.Module):
        raise ValueError(f"{name}(**{kwargs}) returned a {type(net).__name__}, not an nn.Module")
    return net


@contextmanager
def guarded() -> Iterator[list[str]]:
    """The guard around other code than a factory's call (the probe of its outputs): what it
    refused, listed."""
    with _guarded() as done:
        yield done


@contextmanager
def _guarded() -> Iterator[list[str]]:
    _install()
    outer = getattr(_STATE, "done", None)
    _STATE.done = done = []
    try:
        yield done
    finally:
        _STATE.done = outer


_INSTALLED = []


def _install() -> None:
    """The audit hook (``sys.addaudithook``: Python's own events for opening files, starting
    programs, unpickling): added once, idle outside a guard."""
    if not _INSTALLED:
        sys.addaudithook(_hook)
        _INSTALLED.append(True)


def _hook(event: str, args: tuple) -> None:
    done = getattr(_STATE, "done", None)
    if done is None:
        return
    _STATE.done = None  # what the check itself does is not audited against it
    try:
        refused = _refused(event, args)
    finally:
        _STATE.done = done
    if refused:
        done.append(refused)
        raise PermissionError(f"bnn-zoo refused this while a network is built: it {refused}")


def _refused(event: str, args: tuple) -> str | None:
    """What ``event`` does that a network's construction may not, in words; None where it may."""
    if event == "open":
        path, mode, flags = (args + (None, None))[:3]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return None  # an open file descriptor
        path = os.fsdecode(path)
        if any(c in (mode or "") for c in "wax+") or (flags or 0) & WRITE_FLAGS:
            return f"writes {path}"
        return None if _readable(path) else f"opens {path}"
    if event == "pickle.find_class":
        return f"unpickles {args[0]}.{args[1]}"
    if event in PROGRAMS:
        return f"starts a program ({event})"
    if event in CONNECTIONS:
        return f"opens a connection ({event})"
    if event in FILE_CHANGES:
        return f"changes a file ({event} {args[0] if args else ''})"
    if event == "ctypes.dlopen" and args and args[0] is not None and not _readable(os.fsdecode(args[0])):
        return f"loads the library {args[0]}"
    return None


def _readable(path: str) -> bool:
    """Whether a network's construction may read ``path``: Python code (an import), or a file of
    Python's or an installed package's own, or the system's process information."""
    if path.endswith(CODE_SUFFIXES):
        return True
    real = os.path.realpath(path)
    return real.startswith(_allowed_roots())


def _allowed_roots() -> tuple[str, ...]:
    roots = getattr(_allowed_roots, "roots", None)
    if roots is None:
        folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
        roots = tuple(os.path.realpath(f) + os.sep for f in folders) + ("/proc/", "/sys/", "/dev/null", "/dev/urandom")
        _allowed_roots.roots = roots
    return roots


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else ""
