"""Every config field with its description, type, default and bounds, generated from the pydantic
models (``dgrpo run --help``, ``dgrpo config [--help] KEY``).

A kind section (``task``, ``attack``, each item of ``defenses``, ``federated.aggregator``…) lists the
fields of every registered kind, each row saying which kind it belongs to (``when task.kind=gsm8k``).
List items are addressed by index (``defenses.0.atol``, ``swarm.models.1.name``); the help writes the
index as ``N``.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterator, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from dgrpo.config import RunConfig
from dgrpo.errors import ConfigError
from dgrpo.registry import KindOf, lookup, names


@dataclass(frozen=True)
class Row:
    """One config key: ``key`` (dotted, list items as ``N``), its type, default, bounds, description,
    and ``when`` (``task.kind=gsm8k`` for a field of one kind, else "")."""

    key: str
    type: str
    default: str
    bounds: str
    description: str
    when: str = ""


def _kind_of(f: FieldInfo | Any) -> KindOf | None:
    for m in getattr(f, "metadata", ()) or ():
        if isinstance(m, KindOf):
            return m
    return None


def _unwrap(ann) -> tuple[Any, bool]:
    """(annotation without ``| None``, whether None is allowed)."""
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return ann, False


def _type(ann) -> str:
    ann, optional = _unwrap(ann)
    origin = typing.get_origin(ann)
    if origin is Literal:
        text = "|".join(str(a) for a in typing.get_args(ann))
    elif origin is typing.Annotated:
        text = _type(typing.get_args(ann)[0])
    elif origin in (list, tuple, dict):
        text = f"{origin.__name__}[{', '.join(_type(a) for a in typing.get_args(ann) if a is not Ellipsis)}]"
    elif origin in (typing.Union, types.UnionType):
        text = " or ".join(_type(a) for a in typing.get_args(ann))
    elif isinstance(ann, type):
        text = {"StrictInt": "int", "StrictFloat": "float", "StrictStr": "str", "StrictBool": "bool"}.get(ann.__name__, ann.__name__)
    else:
        text = str(ann).replace("typing.", "")
    return f"{text} or null" if optional else text


def _bounds(f: FieldInfo) -> str:
    out = []
    for m in f.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("multiple_of", "multiple of"),
                           ("min_length", "length ≥"), ("max_length", "length ≤"), ("pattern", "matches")):
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sign} {v}")
    return ", ".join(dict.fromkeys(out))


def _default(f: FieldInfo) -> str:
    if f.default_factory is not None:
        value = f.default_factory()
    elif f.default is PydanticUndefined:
        return "(required)"
    else:
        value = f.default
    if isinstance(value, BaseModel):
        kind = getattr(value, "kind", None)
        return f"kind={kind}" if isinstance(kind, str) else "(section defaults)"
    return "null" if value is None else repr(value)


def _kind_rows(kind: str, prefix: str, label: str) -> Iterator[Row]:
    for name in names(kind):
        cfg = lookup(kind, name).config
        if cfg is not None:
            yield from rows(cfg, prefix, f"{label}.kind={name}")


def rows(model: type[BaseModel] = RunConfig, prefix: str = "", when: str = "") -> Iterator[Row]:
    """Every key of ``model`` and its sections, depth first in field order.

    Args:
        prefix: prepended to each key (``swarm.``); when: the condition of a kind's fields.
    """
    for name, f in model.model_fields.items():
        key = prefix + name
        ann, _ = _unwrap(f.annotation)
        kind = _kind_of(f)
        item = typing.get_args(ann)[0] if typing.get_origin(ann) is list else None
        item_kind = _kind_of(type("F", (), {"metadata": typing.get_args(item)[1:]})) if typing.get_origin(item) is typing.Annotated else None
        desc = f.description or ""
        if kind is not None:
            yield Row(key, f"{kind.kind} section (set {key}.kind)", _default(f), "", desc or f"A {kind.kind}: one of {', '.join(names(kind.kind))}.", when)
            yield from _kind_rows(kind.kind, key + ".", key)
        elif item_kind is not None:
            yield Row(key, f"list of {item_kind.kind} sections (set {key}.N.kind)", _default(f), "", desc, when)
            yield from _kind_rows(item_kind.kind, key + ".N.", key + ".N")
        elif isinstance(ann, type) and issubclass(ann, BaseModel):
            yield Row(key, "section", _default(f), "", desc or (ann.__doc__ or "").strip().split("\n")[0], when)
            yield from rows(ann, key + ".", when)
        elif isinstance(item, type) and issubclass(item, BaseModel):
            yield Row(key, f"list of {item.__name__} sections", _default(f), "", desc, when)
            yield from rows(item, key + ".N.", when)
        else:
            yield Row(key, _type(f.annotation), _default(f), _bounds(f), desc, when)


def _normal(key: str) -> str:
    """``defenses.0.atol`` → ``defenses.N.atol``."""
    return ".".join("N" if part.isdigit() else part for part in key.strip().split("."))


def lookup_rows(key: str | None = None) -> list[Row]:
    """The rows of ``key`` and of the keys under it (every row without a key).

    Raises:
        ConfigError: no such key (with the closest keys).
    """
    everything = list(rows())
    if not key:
        return everything
    k = _normal(key)
    found = [r for r in everything if r.key == k or r.key.startswith(k + ".")]
    if not found:
        keys = {r.key.lower(): r.key for r in everything}  # (in lower case, as `dgrpo run` compares: grpo.LR)
        close = [keys[c] for c in difflib.get_close_matches(k.lower(), sorted(keys), n=3)]
        hint = f"; did you mean {', '.join(close)}?" if close else "; `dgrpo config` lists every key"
        raise ConfigError(f"unknown config key {key!r}{hint}")
    return found


def render(found: list[Row], width: int = 100) -> str:
    """Rows as text: ``key  type = default  [bounds]  (when ...)`` then the wrapped description."""
    import textwrap

    lines = []
    for r in found:
        head = f"{r.key}  {r.type} = {r.default}"
        if r.bounds:
            head += f"  [{r.bounds}]"
        if r.when:
            head += f"  (when {r.when})"
        lines.append(head)
        if r.description:
            lines.extend(textwrap.wrap(re.sub(r"\s+", " ", r.description), width, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(lines)


OVERRIDES = """\
Overrides are KEY=VALUE with a dotted KEY; VALUE is read as YAML (4, 1e-5, true, null, [a, b], {kind: topk}).
List items are addressed by index: defenses.0.atol=1e-4 (index = length appends: defenses.1.kind=replay).
A kind's fields apply once its kind is set: task.kind=gsm8k task.path=train.jsonl."""


def help_text(key: str | None = None) -> str:
    """The help of ``key`` (or of every key), with how overrides are written."""
    return f"{OVERRIDES}\n\nconfig keys:\n{render(lookup_rows(key))}"
