"""YAML as dgrpo reads and writes configs: the YAML 1.2 core schema, strict, on PyYAML's safe loader.

PyYAML implements YAML 1.1, whose plain scalars turn ``017`` into 15 (octal), ``1:30`` into 90
(sexagesimal), ``0x1f`` into 31, ``yes``/``on`` into true and ``2024-01-01`` into a date: a config
would silently run with values nobody wrote. Here the implicit types are the 1.2 core schema's, and
narrower still where 1.2 itself reads a number a person may not mean:

* int: ``[-+]?(0|[1-9][0-9]*)`` (decimal, no leading zero);
* float: decimal with a point or an exponent (``0.5``, ``2e-5``, ``1.0e+16``), ``.inf``, ``.nan``;
* bool: ``true``/``false`` (also ``True``, ``TRUE``…); null: ``null``, ``~`` or nothing;
* everything else is a string: ``017``, ``0x1f``, ``0o17``, ``1:30``, ``1_000``, ``yes``, ``2024-01-01``.

A number field given such a string is refused by the config (:class:`dgrpo.registry.StrictConfig`),
never converted, and a string field keeps the text as written: every number remembers its source
(``name: 1.10`` names the folder ``1.10``, not ``1.1``). Explicit tags are the core ones only
(``!!str``, ``!!int``, ``!!float``, ``!!bool``, ``!!null``, ``!!map``, ``!!seq``), read by the same
rules; a key given twice, a lone surrogate (``"\\ud800"``) and an integer beyond ±2^63 are errors.
Every error is a :class:`yaml.YAMLError` or :class:`~dgrpo.errors.ConfigError` with the line.

:class:`Dumper` quotes every string that either schema (1.1 or 1.2) would read as something else,
so a file dgrpo writes reads back the same under both.
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from pathlib import Path

import yaml
from yaml.constructor import ConstructorError

from dgrpo.errors import ConfigError

MAX_INT_DIGITS = 19  # |n| < 2^63 has at most 19 digits; longer is refused before int() sees it

_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\Z")
_FLOAT = re.compile(r"[-+]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?)\Z")
_SPECIAL = {".inf": float("inf"), "+.inf": float("inf"), "-.inf": float("-inf"), ".nan": float("nan")}
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_NULL = ("", "~", "null", "Null", "NULL")
_SURROGATE = re.compile("[\ud800-\udfff]")


class Int(int):
    """A YAML integer that remembers its text (``str`` gives the text as written)."""

    text: str

    def __str__(self) -> str:
        return self.text


class Float(float):
    """A YAML float that remembers its text (``name: 1.10`` stays ``1.10``)."""

    text: str

    def __str__(self) -> str:
        return self.text


def _int(text: str, node) -> Int:
    if not _INT.fullmatch(text):
        raise ConstructorError(None, None, f"{text!r} is not a decimal integer (no leading zero, hex, octal or "
                                           "sexagesimal forms)", node.start_mark)
    if len(text.lstrip("+-")) > MAX_INT_DIGITS or not -(1 << 63) < int(text) < 1 << 63:
        raise ConstructorError(None, None, f"integer {text[:12]}… ({len(text)} characters) is out of range; "
                                           "use a value below 2^63", node.start_mark)
    out = Int(int(text))
    out.text = text
    return out


def _float(text: str, node) -> Float:
    if text.lower() in _SPECIAL:
        value = _SPECIAL[text.lower()]
    elif _FLOAT.fullmatch(text):
        value = float(text)
    else:
        raise ConstructorError(None, None, f"{text!r} is not a decimal number", node.start_mark)
    out = Float(value)
    out.text = text
    return out


class Loader(yaml.SafeLoader):
    """PyYAML's safe loader with the strict 1.2 schema above."""

    yaml_implicit_resolvers: dict = {}
    yaml_constructors = {k: v for k, v in yaml.SafeLoader.yaml_constructors.items()
                         if k in ("tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", None)}

    def construct_scalar_text(self, node) -> str:
        text = self.construct_scalar(node)
        if _SURROGATE.search(text):
            raise ConstructorError(None, None, f"{text[:40]!r} holds a lone surrogate; write text as UTF-8", node.start_mark)
        return text

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class names it
                    break
        return super().construct_mapping(node, deep)


def _construct(fn):
    return lambda loader, node: fn(loader.construct_scalar_text(node), node)


Loader.add_constructor("tag:yaml.org,2002:str", lambda loader, node: loader.construct_scalar_text(node))
Loader.add_constructor("tag:yaml.org,2002:map", yaml.SafeLoader.construct_yaml_map)
Loader.add_constructor("tag:yaml.org,2002:int", _construct(_int))
Loader.add_constructor("tag:yaml.org,2002:float", _construct(_float))


def _bool(text, node):
    if text not in _BOOL:
        raise ConstructorError(None, None, f"{text!r} is not true or false", node.start_mark)
    return _BOOL[text]


def _null(text, node):
    if text not in _NULL:
        raise ConstructorError(None, None, f"{text!r} is not null", node.start_mark)
    return None


Loader.add_constructor("tag:yaml.org,2002:bool", _construct(_bool))
Loader.add_constructor("tag:yaml.org,2002:null", _construct(_null))
_RESOLVERS = [
    ("tag:yaml.org,2002:bool", re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z"), list("tTfF")),
    ("tag:yaml.org,2002:null", re.compile(r"(?:~|null|Null|NULL|)\Z"), ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", _INT, list("-+0123456789")),
    ("tag:yaml.org,2002:float", re.compile(rf"(?:{_FLOAT.pattern[:-2]}|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"),
     list("-+.0123456789")),
]
for _tag, _regexp, _first in _RESOLVERS:
    Loader.add_implicit_resolver(_tag, _regexp, _first)


class Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper that quotes a string whenever YAML 1.1 or this 1.2 schema would read it as
    anything but that string (``'017'``, ``'yes'``, ``'1e5'``, ``'1:30'``)."""

    yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeDumper.yaml_implicit_resolvers.items()}


for _tag, _regexp, _first in _RESOLVERS:
    Dumper.add_implicit_resolver(_tag, _regexp, _first)
Dumper.add_representer(Int, yaml.SafeDumper.represent_int)
Dumper.add_representer(Float, yaml.SafeDumper.represent_float)


def load(text: str):
    """The YAML document ``text`` read with :class:`Loader`.

    Raises:
        yaml.YAMLError: malformed YAML or a value the schema refuses (the message has the line).
    """
    return yaml.load(text, Loader=Loader)  # noqa: S506 (a safe loader with fewer constructors)


def dump(data) -> str:
    """``data`` as block YAML, keys in their order, read back equal by :func:`load` and by YAML 1.1."""
    return yaml.dump(data, Dumper=Dumper, sort_keys=False)


def describe(err: yaml.YAMLError, where: bool = True) -> str:
    """One line for a YAML error: ``line L, column C: problem (context)`` (``where=False``: no position)."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    what = " ".join(str(getattr(err, "problem", None) or err).split())
    context = getattr(err, "context", None)
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None and where else ""
    return f"{at}{what}" + (f" ({' '.join(context.split())})" if context else "")


# The config's inputs: a YAML file and key=value overrides, checked before validation.

MAX_CONFIG_BYTES = 1 << 20  # a config file larger than 1 MiB is refused (`--config /dev/zero`)
MAX_DEPTH = 32  # nesting of mappings and lists in a config or an override value
MAX_INT = 1 << 63  # integers beyond C's int64 are refused wherever they appear (each field has its own bound too)


def _flow_depth(text: str) -> int:
    """Deepest nesting of YAML flow brackets ``[`` / ``{`` in ``text`` (quotes not parsed: a cheap bound
    taken before the parser, which recurses once per level)."""
    depth = deepest = 0
    for m in re.finditer(r"[\[\]{}]", text):
        depth = depth + 1 if m.group() in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def _parse_value(text: str, key: str = "override"):
    """An override's value read as YAML (:mod:`dgrpo.config_yaml`: the 1.2 core schema, strict); text
    that is not YAML at all (``a: b: c``) is the string itself, a value the schema refuses an error."""
    if _flow_depth(text) > MAX_DEPTH:
        raise ConfigError(f"{key}: override value nested more than {MAX_DEPTH} levels deep; flatten it")
    try:
        return load(text)
    except ConstructorError as err:
        raise ConfigError(f"{key}={text[:60]}: {describe(err, where=False)}") from None
    except yaml.YAMLError:
        return text
    except RecursionError:
        raise ConfigError(f"{key}: override value nested more than {MAX_DEPTH} levels deep; flatten it") from None


def _check_shape(data, where: str = "") -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` and integers outside ±2^63 (iterative: no recursion).

    Raises:
        ConfigError: names the key path.
    """
    stack = [(data, where, 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"{path or '(config)'}: nested more than {MAX_DEPTH} levels deep; flatten it")
        if isinstance(node, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}.{i}" if path else str(i), depth + 1) for i, v in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool) and not -MAX_INT < node < MAX_INT:
            raise ConfigError(f"{path or '(config)'}: integer {str(node)[:12]}… is out of range; use a value below 2^63 "
                              "(each field's own bound is in its description)")


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a nested dict, in place.

    A numeric part indexes a list (``defenses.0.atol=1e-4``); the index equal to the list's length
    appends an item (``defenses.1.kind=replay``). Why dgrpo parses overrides itself rather than with
    pydantic-settings' CLI: docs/config.md.

    Raises:
        ConfigError: an override without ``=``, a key more than :data:`MAX_DEPTH` parts long, a value
            nested deeper than that, an index past the end of a list, or a key that descends into a
            value that is neither a mapping nor a list.
    """
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item[:80]!r} must look like key.sub=value")
        key, value = item.split("=", 1)
        bad = next((c for c in item if unicodedata.category(c) in ("Cc", "Zl", "Zp", "Cs")), None)
        if bad is not None:  # YAML would fold a newline into a space and the run would go on renamed
            what = "bytes that are not UTF-8" if unicodedata.category(bad) == "Cs" else "the control character"
            raise ConfigError(f"override {key.strip()[:80]!r} holds {what} {bad!r}; "
                              "config values and keys must be printable text")
        parts = key.strip().split(".")
        if len(parts) > MAX_DEPTH:
            raise ConfigError(f"override key {key[:40]!r}… has {len(parts)} parts; config keys are at most {MAX_DEPTH} deep")
        node: dict | list = data
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            fresh = [] if not last and parts[depth + 1].isdigit() else {}
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) > len(node):
                    raise ConfigError(f"override {item!r}: {where} indexes a list of {len(node)} items (indices 0..{len(node)}; {len(node)} appends)")
                if int(part) == len(node):
                    node.append(None)
                index: int | str = int(part)
            else:
                index = part
            if last:
                parsed = _parse_value(value, key.strip())
                _check_shape(parsed, key.strip())
                node[index] = parsed
                break
            child = node[index] if isinstance(node, list) else node.get(index)
            if not isinstance(child, (dict, list)):
                child = fresh  # a new section (or list); an override replaces a scalar or null there
                node[index] = child
            node = child
    return data


def _read_regular(path: str | Path) -> bytes:
    """At most :data:`MAX_CONFIG_BYTES` + 1 bytes of a regular file: a FIFO, a device or a folder is
    refused without blocking (opened non-blocking, checked with fstat)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")
            raise ConfigError(f"config {path} is {what}, not a regular file; pass a YAML file of run settings")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)


def read_config_file(path: str | Path) -> dict:
    """The mapping of a YAML config file of at most :data:`MAX_CONFIG_BYTES` (empty file → {}), read
    with :mod:`dgrpo.config_yaml` (the YAML 1.2 core schema, strict).

    Raises:
        ConfigError: unreadable, not a regular file (a FIFO, a device), too large, not UTF-8, not YAML
            (with its line), a value the schema refuses, nested too deeply, or not a mapping.
    """
    try:
        raw = _read_regular(path)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB; pass a YAML file of run settings")
        text = raw.decode("utf-8")
        if _flow_depth(text) > MAX_DEPTH:
            raise RecursionError
        data = load(text)
        data = {} if data is None else data
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read config {path}: {' '.join(str(err).split())}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"cannot read config {path}: {describe(err)}") from None
    except RecursionError:
        raise ConfigError(f"config {path} is nested more than {MAX_DEPTH} levels deep; flatten it") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping at the top level")
    _check_shape(data)
    return data
