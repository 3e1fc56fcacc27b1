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
rules (a pair of surrogate escapes, ``"\\ud83d\\ude00"``, is the one character it encodes, 😀); a key
given twice, a lone surrogate (``"\\ud800"``), an integer beyond ±2^63, a float that
underflows to 0 (``1e-400``) or overflows to infinity (``1e400``), and aliases that expand to more than
:data:`MAX_NODES` values (the "billion laughs") or contain themselves are errors. Every error is a
:class:`yaml.YAMLError` with the line. The config's file and overrides: :mod:`dgrpo.config_inputs`.

:class:`Dumper` quotes every string that either schema (1.1 or 1.2) would read as something else,
so a file dgrpo writes reads back the same under both.
"""

from __future__ import annotations

import re

import yaml
from yaml.constructor import ConstructorError

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
        if value == 0.0 and re.search(r"[1-9]", text.lower().split("e")[0]):
            raise ConstructorError(None, None, f"{text[:40]!r} is too small for a float and would be read as 0; "
                                               "write 0 or a value above 1e-300", node.start_mark)
        if value in (float("inf"), float("-inf")):
            raise ConstructorError(None, None, f"{text[:40]!r} is too large for a float and would be read as "
                                               "infinity; write .inf if that is meant", node.start_mark)
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

    forbid_anchors = False  # overrides: an anchor or alias in one value is refused (it would drop text)

    def compose_node(self, parent, index):
        event = self.peek_event()
        if self.forbid_anchors and (isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None)):
            raise ConstructorError(None, None, "YAML anchors (&a) and aliases (*a) are not read in an override; "
                                               "quote the value to mean that text", event.start_mark)
        return super().compose_node(parent, index)

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_scalar_text(self, node) -> str:
        text = self.construct_scalar(node)
        if _SURROGATE.search(text):  # a pair of escapes ("\ud83d\ude00", as JSON writes 😀) is its character
            try:
                text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
            except UnicodeDecodeError:
                raise ConstructorError(None, None, f"{text[:40]!r} holds a lone surrogate; write text as UTF-8",
                                       node.start_mark) from None
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


MAX_NODES = 100_000  # values a document may hold once its aliases are expanded ("billion laughs")


def _check_expansion(root) -> None:
    """Refuse a document whose aliases expand to more than :data:`MAX_NODES` values, or refer to
    themselves, before anything walks the expanded tree (linear in the distinct nodes).

    Raises:
        ConstructorError: with the line of the document's start.
    """
    size: dict[int, int] = {}
    stack: list = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            if size[key] > MAX_NODES:
                raise ConstructorError(None, None, f"the aliases (*a) of this YAML expand to more than {MAX_NODES:,} "
                                                   "values; write the config out without them", root.start_mark)
            continue
        if key in size:
            continue
        if key in open_:
            raise ConstructorError(None, None, "a YAML alias (*a) refers to a value that contains it; "
                                               "write the config out without it", node.start_mark)
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


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


class OverrideLoader(Loader):
    """:class:`Loader` for one override value: anchors and aliases refused."""

    forbid_anchors = True


def load(text: str, override: bool = False):
    """The YAML document ``text`` read with :class:`Loader` (``override``: :class:`OverrideLoader`).

    Raises:
        yaml.YAMLError: malformed YAML or a value the schema refuses (the message has the line).
    """
    return yaml.load(text, Loader=OverrideLoader if override else Loader)  # noqa: S506 (a safe loader, fewer constructors)


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
