"""Command-line flags made from frozen config dataclasses, so a flag's name, type, default
and help are stated once: in the dataclass (its field and its docstring's Attributes).

    add_config_flags(parser, VAETrainConfig, title="training")
    config = config_from_args(VAETrainConfig, args)

A field `learning_rate: float = 1e-3` becomes `--learning-rate` (float, default 1e-3);
`tuple[str, ...]` fields take several values; bool fields are on/off switches
(`--measure` / `--no-measure`); nested dataclass fields become `--<field>-<name>` flags,
or plain `--<name>` flags with `flatten=True` (argparse refuses a name used twice);
fields without a default are required unless `skip`ped and filled in by the caller.
A field with `metadata={"const": value}` takes an optional value: the flag alone means
`value` (`--ray` is `--ray local`); `metadata["metavar"]` names the value in the help.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from collections.abc import Iterable
from typing import Any

from taso_env.errors import ConfigError


def _attribute_help(cls: type) -> dict[str, str]:
    """{field: help} from the "Attributes:" section of the class docstring ("a / b: ..."
    documents both a and b)."""
    doc = cls.__doc__ or ""
    match = re.search(r"^\s*Attributes:\s*$(.*?)(?:^\s*\w[\w ]*:\s*$|\Z)", doc, re.M | re.S)
    if not match:
        return {}
    helps: dict[str, str] = {}
    names: list[str] = []
    for line in match.group(1).splitlines():
        head = re.match(r"^\s{4,8}([\w /]+?):\s*(.*)$", line)
        if head and all(re.fullmatch(r"\w+", n.strip()) for n in head.group(1).split("/")):
            names = [n.strip() for n in head.group(1).split("/")]
            for n in names:
                helps[n] = head.group(2).strip()
        elif names and line.strip():
            for n in names:
                helps[n] += " " + line.strip()
    return helps


def _flag(name: str, prefix: str) -> str:
    return "--" + (f"{prefix}_{name}" if prefix else name).replace("_", "-")


def _dest(name: str, prefix: str) -> str:
    return f"{prefix}_{name}" if prefix else name


def add_config_flags(parser: argparse.ArgumentParser, cls: type, *, title: str | None = None,
                     skip: Iterable[str] = (), prefix: str = "", defaults: Any = None,
                     flatten: bool = False) -> None:
    """Adds one flag per field of the dataclass `cls` (see the module docstring).

    Args:
        parser: where the flags go (in an argument group named `title`, if given).
        skip: fields the caller fills in itself (not flags).
        prefix: prepended to every flag and destination (for nested configs).
        defaults: an instance whose values replace the dataclass defaults.
        flatten: nested configs' flags without the field's name as prefix.
    """
    skip = set(skip)
    group = parser.add_argument_group(title or f"{cls.__name__}") if title is not False else parser
    helps = _attribute_help(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            nested = getattr(defaults, f.name) if defaults is not None else None
            add_config_flags(parser, kind, title=f"{title or cls.__name__}: {f.name} ({kind.__name__})",
                             prefix=prefix if flatten else _dest(f.name, prefix), defaults=nested, flatten=flatten)
            continue
        if defaults is not None:
            default = getattr(defaults, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        text = helps.get(f.name, "")
        kwargs: dict[str, Any] = {"dest": _dest(f.name, prefix)}
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif origin is tuple:
            kwargs["nargs"] = "+"
            kwargs["type"] = args[0] if args else str
            kwargs["metavar"] = f.name.upper().rstrip("S") or "VALUE"
        elif kind in (int, float, str):
            kwargs["type"] = kind
            if "const" in f.metadata:
                kwargs.update(nargs="?", const=f.metadata["const"], metavar=f.metadata.get("metavar"))
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: no flag for type {kind!r}")
        if default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = default
            shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
            text = f"{text} (default: {shown})".strip() if kind is not bool and shown != "" else text
        group.add_argument(_flag(f.name, prefix), help=text.replace("%", "%%") or None, **kwargs)


def config_from_args(cls: type, args: argparse.Namespace, *, prefix: str = "", flatten: bool = False,
                     **fixed: Any) -> Any:
    """The `cls` instance made of the flags `add_config_flags` added (with the same
    `prefix` and `flatten`), with `fixed` fields (the skipped ones) given by the caller."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in fixed:
            values[f.name] = fixed[f.name]
            continue
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            values[f.name] = config_from_args(kind, args, prefix=prefix if flatten else _dest(f.name, prefix),
                                              flatten=flatten)
            continue
        value = getattr(args, _dest(f.name, prefix))
        values[f.name] = tuple(value) if isinstance(value, list) else value
    try:
        return cls(**values)
    except (ValueError, TypeError) as err:  # a config's own validation, as a typed error
        raise ConfigError(f"bad {cls.__name__}: {err}") from None
