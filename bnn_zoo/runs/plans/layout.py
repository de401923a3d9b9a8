"""A config's keys laid out as the schema lays them out, checked before they are merged (a config
file's, a checkpoint's, an override's): each failure one line naming the key and what it must be.

Usage: ``check_layout({"train": {"epochs": [3]}}, Config)  # ConfigError("bad value for train.epochs: ...")``
"""
from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Optional, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, OmegaConf

from ...core.errors import ConfigError, show
from .checks import HIDDEN

# What a key of each plain kind must be, in a message (of a list's items: PLURAL)
KINDS = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}
PLURAL = {int: "whole numbers", float: "numbers", str: "strings"}
MAPPINGS = {"model.kwargs": "a mapping of the network's keyword arguments (for example {width: 16})",
            "data.ood": "a mapping of names to folders of images (for example {my_letters: DIR})"}


def check_layout(base: Any, schema: type, source: Optional[str] = None) -> None:
    """``base`` (a config file's keys, a checkpoint's, an override's) laid out as ``schema`` (the
    config's dataclass) lays them out, before it is merged: a mapping of sections, each a mapping
    of its keys; lists of plain values, mappings, booleans as true or false, and null only where a
    key may be null. Unknown keys, interpolations and plain values of another kind are the merge's
    to name. Each failure one line naming the key, what it must be, and ``source`` (the file it came
    from) where given."""
    where = f" in {source}" if source else ""
    if isinstance(base, DictConfig):
        base = OmegaConf.to_container(base, resolve=False)
    if not isinstance(base, dict):
        raise ConfigError(f"a config{where} is a mapping of sections (arch: lenet, train: {{epochs: 3}}, ...), "
                          f"not a {type(base).__name__}")
    _check_keys(base, schema, "", where)


def _check_keys(node: dict, schema: type, prefix: str, where: str) -> None:
    hints = get_type_hints(schema)
    for key, value in node.items():
        hint, name = hints.get(key), f"{prefix}{key}"
        if hint is None or (isinstance(value, str) and "${" in value):
            continue  # an unknown key, an interpolation: the merge names them, or resolves it
        if is_dataclass(hint):
            if not isinstance(value, dict):
                example = next(f"{f.name}: {f.default}" for f in fields(hint) if f.default not in (None, MISSING))
                raise ConfigError(f"bad config section {name!r}{where}: a mapping of its keys (for example "
                                  f"{name}: {{{example}}}), not {_shown(value)}")
            _check_keys(value, hint, f"{name}.", where)
            continue
        reason = _misfit(name, hint, value)
        if reason:
            raise ConfigError(f"bad value for {name}{where}: {reason}")


def _misfit(name: str, hint: Any, value: Any) -> Optional[str]:
    """Why ``value`` cannot be key ``name`` of type ``hint``, None where the layout fits."""
    optional = type(None) in get_args(hint)
    kind = next(k for k in get_args(hint) if k is not type(None)) if optional else hint
    plain = lambda v: v is not None and not isinstance(v, (list, dict))  # noqa: E731
    origin, inner = get_origin(kind), get_args(kind)
    if value is None:
        fits = optional
    elif origin is list:
        fits = isinstance(value, list) and all(map(plain, value))
    elif origin is dict:
        fits = isinstance(value, dict) and (inner[1] is Any or all(map(plain, value.values())))
    else:  # a boolean read strictly: true or false, not 2 or yes (which the merge would take as true)
        fits = plain(value) and (kind is not bool or isinstance(value, bool))
    if fits:
        return None
    if name == "model.hidden":
        return f"{HIDDEN}; got {_shown(value)}"
    what = MAPPINGS.get(name) or (f"a list of {PLURAL[inner[0]]}" if origin is list else KINDS.get(kind, str(kind)))
    return f"must be {what}, not {_shown(value)}"


def _shown(value: Any) -> str:
    return "null" if value is None else show(value)
