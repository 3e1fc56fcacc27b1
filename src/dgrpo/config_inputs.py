"""A run's config inputs before validation: a YAML file and ``key=value`` overrides, read as written.

The file and each override value are YAML read by :mod:`dgrpo.config_yaml` (the 1.2 core schema,
strict). Checked here, each failure one :class:`~dgrpo.errors.ConfigError` line naming the key or the
file: a non-regular or oversized file, nesting deeper than :data:`MAX_DEPTH`, integers beyond ±2^63,
and in an override every YAML form that would drop part of the text as written (a ``#`` comment, a
``---`` document marker, an anchor or alias) and a list index that is not ASCII digits (``¹``).
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from pathlib import Path

import yaml
from yaml.constructor import ConstructorError

from dgrpo.config_yaml import describe, load
from dgrpo.errors import ConfigError

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


_DOCUMENT_MARKER = re.compile(r"\s*---(?:\s|\Z)")


def _comment_at(text: str) -> int | None:
    """Where a YAML comment starts in ``text`` (a ``#`` at the start or after a space or tab, outside
    quotes), or None."""
    quote = None
    for i, c in enumerate(text):
        if quote is not None:
            if c == quote and not (quote == '"' and text[i - 1] == "\\"):
                quote = None
        elif c in "'\"" and (i == 0 or text[i - 1] in " \t[{,:"):
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t"):
            return i
    return None


def _parse_value(text: str, key: str = "override"):
    """An override's value read as YAML (:mod:`dgrpo.config_yaml`: the 1.2 core schema, strict); text
    that is not YAML at all (``a: b: c``) is the string itself, a value the schema refuses an error.

    Raises:
        ConfigError: nested too deeply, a value the schema refuses, or YAML syntax that would drop part
            of the text as written: a comment (``3 # note``), a document marker (``---``), an anchor
            or alias (``&a x``).
    """
    if _flow_depth(text) > MAX_DEPTH:
        raise ConfigError(f"{key}: override value nested more than {MAX_DEPTH} levels deep; flatten it")
    at = _comment_at(text)
    if at is not None:
        raise ConfigError(f"{key}={text[:60]}: '#' here starts a YAML comment and the rest would be dropped; "
                          f"remove the comment, or quote the value to keep the text ({key}=\"{text[:40]}\")")
    if _DOCUMENT_MARKER.match(text):
        raise ConfigError(f"{key}={text[:60]}: '{text.strip()[:3]}' is a YAML document marker, not a value; "
                          f"quote it to mean that text ({key}=\"{text.strip()[:40]}\")")
    try:
        return load(text, override=True)
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


def _index(part: str) -> bool:
    """Whether a key part is a list index: ASCII digits only (``'¹'`` and ``'٠'`` are digits to
    ``str.isdigit`` but no index)."""
    return part.isascii() and part.isdigit()


def _check_not_dropping(parts: list[str], item: str, written: list[tuple[tuple, str]]) -> None:
    """Refuse an override that gives a section or list whole (``grpo={}``, ``defenses=[]``, ``grpo=null``)
    after an earlier override set a key inside it (``grpo.lr=1e-5``): the earlier value would be dropped
    without a word. The same key twice is not refused (the last one is the value, as with ``seed=1 seed=2``).
    Records ``parts`` in ``written``.

    Raises:
        ConfigError: names both overrides, the key that would be dropped and the order that keeps it.
    """
    norm = tuple(int(p) if _index(p) else p for p in parts)
    for earlier, text in written:
        if len(earlier) > len(norm) and earlier[: len(norm)] == norm:
            section, lost = ".".join(parts), ".".join(str(p) for p in earlier)
            raise ConfigError(f"override {item[:80]} after {text[:80]} would drop {lost} (a section or list given whole "
                              f"replaces all it held): give the section first, then its keys ({item[:40]} {text[:40]}), "
                              f"or write {lost.removeprefix(section + '.')} inside it")
    written.append((norm, item))


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a nested dict, in place.

    A numeric part indexes a list (``defenses.0.atol=1e-4``); the index equal to the list's length
    appends an item (``defenses.1.kind=replay``). The same key twice: the last value; a section or list
    given whole after an earlier override set a key in it: refused (:func:`_check_not_dropping`). Why
    dgrpo parses overrides itself rather than with pydantic-settings' CLI: docs/config.md.

    Raises:
        ConfigError: an override without ``=``, a key more than :data:`MAX_DEPTH` parts long, a value
            nested deeper than that, a whole section after one of its keys, an index past the end of a
            list, or a key that descends into a value that is neither a mapping nor a list.
    """
    written: list[tuple[tuple, str]] = []  # (key parts, override) of every override applied so far
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
        digits = next((p for p in parts if not _index(p) and any(unicodedata.category(c) in ("Nd", "No") and not c.isascii()
                                                                  for c in p)), None)  # ("rounds2": a key, a typo)
        if digits is not None:  # ("defenses.¹.kind": int() fails on '¹', and '٠' would silently be index 0)
            raise ConfigError(f"override {key.strip()[:80]!r}: {digits!r} is not a list index or a key; "
                              "write list indices in ASCII digits (defenses.0.kind=replay)")
        if len(parts) > MAX_DEPTH:
            raise ConfigError(f"override key {key[:40]!r}… has {len(parts)} parts; config keys are at most {MAX_DEPTH} deep")
        _check_not_dropping(parts, item, written)
        node: dict | list = data
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            fresh = [] if not last and _index(parts[depth + 1]) else {}
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not _index(part) or int(part) > len(node):
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


def _what(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "a regular file"
            if stat.S_ISREG(mode) else "not a file")


def path_problem(path: str | Path, kind: str = "file") -> str | None:
    """Why ``path`` is not the ``kind`` (``"file"``: a regular file; ``"folder"``) a run needs, or None.

    ``"no such file"``; ``"is a folder, not a file"``; ``"is a FIFO, not a regular file"``; ``"is a
    file, not a folder"``; ``"cannot be read (Permission denied)"``. Never opens the path (a FIFO
    would block)."""
    try:
        mode = os.stat(Path(path).expanduser()).st_mode
    except FileNotFoundError:
        return f"no such {kind}"
    except OSError as err:  # permission, a file used as a folder, a name too long, a loop of links
        return f"cannot be read ({err.strerror})"
    if kind == "file" and not stat.S_ISREG(mode):
        return f"is {_what(mode)}, not a {'file' if stat.S_ISDIR(mode) else 'regular file'}"
    if kind == "folder" and not stat.S_ISDIR(mode):
        return f"is {_what(mode)}, not a folder"
    return None


def _read_regular(path: str | Path) -> bytes:
    """At most :data:`MAX_CONFIG_BYTES` + 1 bytes of a regular file: a FIFO, a device or a folder is
    refused without blocking (opened non-blocking, checked with fstat)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"config {path} is {_what(mode)}, not a regular file; pass a YAML file of run settings")
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
