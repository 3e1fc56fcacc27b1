"""The one registry of kinds, and the strict base every config derives from.

Every kind — task, attack, defense, transport, aggregator, update attack — registers with the same
decorator in the module that defines it, next to its config class::

    @register("attack", "injection", config=InjectionAttackConfig)
    class InjectionAttack: ...

and a config refers to it by name (``attack.kind=injection``). Nothing else lists the kinds: the
first lookup of a name imports the module of that name in the kind's home (``dgrpo.attacks.injection``)
and, failing that, every module there (:data:`HOMES`). A kind in the user's own package is named by
import path, ``attack.kind=mypkg.attacks:Shout`` (the module registers it with the same decorator; the
config keeps the path, so a resumed or distributed run imports it again; examples/mykinds).

Config checks import the modules of the kinds a config names, so kind modules keep torch and
transformers out of their module level and import them where they are used, or read torch through a
:class:`LazyModule` (``tests/test_layers.py`` checks every kind module).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import re
import types
import typing
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Annotated, Any, Callable, Iterator, Mapping

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, SerializeAsAny, Strict, TypeAdapter,
                      ValidationInfo, field_validator, model_validator)

from dgrpo.errors import UnknownKind

HOMES = {  # kind → the package (or module) whose modules define it
    "task": "dgrpo.tasks",
    "attack": "dgrpo.attacks",
    "defense": "dgrpo.defenses",
    "transport": "dgrpo.transports",
    "aggregator": "dgrpo.robust.aggregators",
    "update_attack": "dgrpo.robust.update_attacks",
}


def _leaf_types(annotation: Any) -> set:
    """The plain types a field annotation admits (``int | None`` → {int, NoneType})."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, Annotated):
        return set().union(*(_leaf_types(a) for a in typing.get_args(annotation) if not isinstance(a, (str, int, float))))
    return {annotation}


def _scalar_types(annotation: Any) -> set | None:
    """The scalar types a field admits when they are only numbers, booleans and None (also inside a
    list, tuple or mapping); None for any field that admits text or anything else."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, set, frozenset, dict):
        inner = [_scalar_types(a) for a in typing.get_args(annotation) if a is not Ellipsis]
        return None if not inner or any(i is None for i in inner) else set().union(*inner)
    leaves = {a for a in _leaf_types(annotation) if isinstance(a, type)}
    return leaves if leaves and leaves <= {int, float, bool, type(None)} and leaves - {type(None)} else None


_CANONICAL_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_NUMBERISH = re.compile(r"[-+]?[0-9][0-9a-fA-FxXoObB_:.eE+-]*|[-+]?\.[0-9][0-9_eE+-]*")  # 1:30, 0x1f, 0o17, 1_000


@functools.lru_cache(maxsize=None)
def _adapter(annotation: Any) -> TypeAdapter:
    return TypeAdapter(annotation)


def _text_for(annotation: Any, value: Any) -> str | None:
    """What a number or boolean field (or a list or mapping of them) would silently convert: text
    (``"017"``, ``"1_000"``, ``"yes"``) where no text is allowed, or a number where only true or false
    is, and that pydantic would accept. None when pydantic would not convert it (it names the error
    itself) or nothing needs converting."""
    types_ = _scalar_types(annotation)
    if types_ is None or not _has(value, str, types_) or any(isinstance(a, Strict) and a.strict for a in _leaf_types(annotation)):
        return None
    if isinstance(value, str) and any(value in typing.get_args(a) for a in _leaf_types(annotation)
                                      if typing.get_origin(a) is typing.Literal):
        return None  # (a number or a word: `round_s: auto`)
    try:
        _adapter(annotation).validate_python(value)
    except (ValueError, TypeError):
        if not (types_ & {int, float} and isinstance(value, str) and _NUMBERISH.fullmatch(value.strip())):
            return None  # refused anyway, in pydantic's words
    if types_ & {int, float}:
        return f"a number, not the text {value!r} (numbers are decimal: no leading zero, hex or sexagesimal form)"
    return f"true or false, not {value!r}"


def _not_whole(annotation: Any, value: Any) -> str | None:
    """The text of a float given to an integer-only field when its written value is not a whole number
    (``12.0000000000000001`` reads as the float 12.0, which pydantic accepts as 12; a YAML float keeps
    its text in ``.text``); None otherwise (``12.0`` and ``1e2`` are whole)."""
    types_ = _scalar_types(annotation)
    if not isinstance(value, float) or types_ is None or int not in types_ or float in types_:
        return None
    written = getattr(value, "text", None) or repr(value)
    try:
        return None if Fraction(written).denominator == 1 else written
    except (ValueError, ZeroDivisionError):
        return None  # (inf, nan: refused by the field itself)


def _has(value: Any, text: type, types_: set) -> bool:
    """Whether ``value`` holds text, or (for a boolean-only field) a number, anywhere in it."""
    if isinstance(value, (list, tuple)):
        return any(_has(v, text, types_) for v in value)
    if isinstance(value, dict):  # (a key written as canonical decimal text is JSON's way to write an int key: {"2": 2})
        return any((_has(k, text, types_) and not _CANONICAL_INT.fullmatch(str(k))) or _has(v, text, types_)
                   for k, v in value.items())
    number_for_bool = isinstance(value, (int, float)) and not isinstance(value, bool) and not types_ & {int, float}
    return isinstance(value, text) or number_for_bool


class StrictConfig(BaseModel):
    """Base of every config: unknown keys are errors, values are frozen, inf and NaN are refused, a
    number field refuses ``true``/``false`` (pydantic would read ``rounds: true`` as 1), and a number or
    boolean field refuses text (pydantic would read ``seed: "017"`` as 17 and ``greedy: "yes"`` as true;
    :mod:`dgrpo.config_yaml` keeps such YAML scalars as text)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, f in cls.model_fields.items():
                leaves = _leaf_types(f.annotation)
                if isinstance(data.get(name), bool) and bool not in leaves and leaves & {int, float}:
                    raise ValueError(f"{name} must be a number, not {str(data[name]).lower()}")
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _no_text_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if cls.model_config.get("strict"):
            return value  # (pydantic refuses text for numbers itself, in its own words)
        annotation = cls.model_fields[info.field_name].annotation
        text = _text_for(annotation, value)
        if text is not None:
            raise ValueError(f"must be {text}")
        whole = _not_whole(annotation, value)
        if whole is not None:
            raise ValueError(f"must be a whole number, not {whole} (a float that only rounds to an integer)")
        return value


def _printable(text: str) -> str:
    bad = sorted({c for c in text if ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ValueError(f"must not contain control characters (found {', '.join(repr(c) for c in bad)}); "
                         "use a name or path of printable characters")
    return text


PathText = Annotated[str, AfterValidator(_printable)]
"""A name or file path in a config: control characters (NUL, newline, escape, …) are refused."""


class KindConfig(StrictConfig):
    """Config of one registered kind: ``kind`` is its registered name."""

    kind: str

    def check(self, run: Any) -> None:
        """Cross-field rules of this kind against the whole run config ``run`` (a ``RunConfig``).

        Raises:
            ValueError: a rule is broken (the message names the fields and the fix).
        """


@dataclass(frozen=True)
class Entry:
    """One registered kind: its builder (class or function), config class and extra facts."""

    kind: str
    name: str
    builder: Callable | None
    config: type[KindConfig] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


_ENTRIES: dict[str, dict[str, Entry]] = {kind: {} for kind in HOMES}


def _label(kind: str) -> str:
    return kind.replace("_", " ")


def register(kind: str, name: str, *, config: type[KindConfig] | None = None, **meta: Any):
    """Decorator registering a builder as kind ``kind`` named ``name``.

    Decorating a config class itself registers a kind that is nothing but its config
    (``attack.kind=none``).

    Args:
        config: the kind's config class (its ``kind`` field defaults to ``name``).
        **meta: facts about the kind that others read (an aggregator's node condition, …).

    Raises:
        ValueError: unknown kind, a config whose ``kind`` is not ``name``, or the name taken twice.
    """
    if kind not in HOMES:
        raise ValueError(f"unknown kind {kind!r}; kinds: {sorted(HOMES)}")

    def deco(builder):
        only_config = config is None and isinstance(builder, type) and issubclass(builder, KindConfig)
        cfg_class = builder if only_config else config
        if cfg_class is not None and cfg_class.model_fields["kind"].default != name:
            raise ValueError(f"{cfg_class.__name__}.kind must default to {name!r}")
        old = _ENTRIES[kind].get(name)
        where = f"{builder.__module__}.{builder.__qualname__}"
        if old is not None and old.meta["defined_in"] != where:
            raise ValueError(f"{_label(kind)} {name!r} registered twice ({old.meta['defined_in']}, {where})")
        _ENTRIES[kind][name] = Entry(kind, name, None if only_config else builder, cfg_class, {**meta, "defined_in": where})
        return builder

    return deco


def _import_home(kind: str, name: str | None) -> None:
    """Import the module defining ``name`` (same-named module first), or every module of the home."""
    home = importlib.import_module(HOMES[kind])
    if home.__spec__.submodule_search_locations is None:  # a module: importing it registered all it defines
        return
    if name is not None and name.isidentifier() and importlib.util.find_spec(f"{home.__name__}.{name}"):
        importlib.import_module(f"{home.__name__}.{name}")
        if name in _ENTRIES[kind]:
            return
    for info in pkgutil.iter_modules(home.__spec__.submodule_search_locations):
        if not info.name.startswith("_"):
            importlib.import_module(f"{home.__name__}.{info.name}")


_PATHS: dict[str, dict[str, Entry]] = {kind: {} for kind in HOMES}  # "module:Name" → the entry it names


def _from_path(kind: str, spec: str) -> Entry:
    """The kind an import path names: ``module:name`` (the name it is registered under) or ``module:Object``
    (the registered class, function or config class itself). Importing ``module`` registers it.

    Raises:
        UnknownKind: the module cannot be imported, or registers no such kind (says how to register it).
    """
    if spec in _PATHS[kind]:
        return _PATHS[kind][spec]
    module, _, attr = spec.partition(":")
    label = _label(kind)
    if not module or not attr or ":" in attr:
        raise UnknownKind(f"{label} {spec!r}: an import path is module:Name (e.g. mypkg.attacks:Shout)")
    try:
        imported = importlib.import_module(module)
    except ImportError as err:
        raise UnknownKind(f"{label} {spec!r}: cannot import {module!r} ({err}); is its package on PYTHONPATH?") from None
    obj = getattr(imported, attr, None)
    found = [e for e in _ENTRIES[kind].values() if e.meta["defined_in"].startswith(f"{module}.")
             and (e.name == attr or (obj is not None and obj in (e.builder, e.config)))]
    if not found:
        raise UnknownKind(f"{label} {spec!r}: {module} registers no {label} {attr!r}; decorate it with "
                          f"@dgrpo.registry.register({kind!r}, name, config=...)")
    _PATHS[kind][spec] = found[0]
    return found[0]


def lookup(kind: str, name: str) -> Entry:
    """The registered kind ``name``, or the kind an import path ``module:Name`` names in the user's own code.

    Raises:
        UnknownKind: nothing of that name is registered (lists the known names), or the path names nothing.
    """
    if ":" in name:
        return _from_path(kind, name)
    if name not in _ENTRIES[kind]:
        _import_home(kind, name)
    if name not in _ENTRIES[kind]:
        raise UnknownKind(f"unknown {_label(kind)} {name!r}; known: {', '.join(names(kind))}")
    return _ENTRIES[kind][name]


def names(kind: str) -> list[str]:
    """Every registered name of ``kind`` (imports the whole home)."""
    _import_home(kind, None)
    return sorted(_ENTRIES[kind])


class Table(Mapping[str, Callable]):
    """Live read-only view name → builder of one kind (e.g. ``AGGREGATORS``)."""

    def __init__(self, kind: str):
        self.kind = kind

    def __getitem__(self, name: str) -> Callable:
        try:
            return lookup(self.kind, name).builder
        except UnknownKind:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(names(self.kind))

    def __len__(self) -> int:
        return len(names(self.kind))


class LazyModule:
    """A module imported when one of its attributes is first read: ``torch = LazyModule("torch")``
    keeps a kind module that is tensor code (aggregators, update attacks, the distributed transport)
    importable by config checks without importing torch."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


def kind_field(kind: str, default: str | None = None):
    """The pydantic type of a config field holding one ``kind``: a mapping whose ``kind`` (else
    ``default``) names a registered kind, validated by that kind's config class."""
    label = _label(kind)

    def resolve(value: Any) -> KindConfig:
        if isinstance(value, KindConfig):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"a {label} is a mapping with a `kind`, got {type(value).__name__}")
        name = value.get("kind", default)
        if not isinstance(name, str):
            raise ValueError(f"a {label} needs a `kind` (one of: {', '.join(names(kind))})")
        entry = lookup(kind, name)
        if entry.config is None:
            raise ValueError(f"{label} {name!r} takes no config")
        cfg = entry.config.model_validate({**value, "kind": entry.name})
        return cfg if name == entry.name else cfg.model_copy(update={"kind": name})  # keeps the path: reloads anywhere

    return SerializeAsAny[Annotated[KindConfig, BeforeValidator(resolve), KindOf(kind, default)]]


@dataclass(frozen=True)
class KindOf:
    """Marks a config field as holding one ``kind`` (read by the CLI's field help, ignored by pydantic)."""

    kind: str
    default: str | None = None
