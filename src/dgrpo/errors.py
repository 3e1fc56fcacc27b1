"""Every error the command line reports as one clear line (exit code 2, or 3 for a failed peer).

They live here, away from torch and transformers, so that ``dgrpo`` can catch them without importing
either: a bad config is reported in well under a second. Each message names the field, file or
peer at fault and what to change.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the field and what to change."""


class DataError(ValueError):
    """A data file is missing, unreadable or not in the expected format; says file and line."""


class MetricsFileError(ValueError):
    """A metrics.jsonl that is not a list of round records."""


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read back (names the file)."""


class UnknownKind(ValueError):
    """No kind of that name is registered (names the kind and lists the known ones)."""


class PolicyLoadError(RuntimeError):
    """Raised when a policy cannot be found or loaded; the message says what to install or fix."""


class PeerFailure(RuntimeError):
    """A peer (named in the message) sent nothing in time, or this node was excluded by its peers."""


class StartupStop(PeerFailure):
    """The ranks stopped together in their first round's relays, before anything was trained (a start-up stop notice
    met there: :mod:`dgrpo.transports.startstops`); a run folder this process made holding nothing but its config
    is removed (:func:`dgrpo.training.run_dir.drop_unused`)."""


class SandboxUnavailable(RuntimeError):
    """The OS sandbox for model-written programs cannot run here (bwrap, user namespaces or libseccomp
    missing); the message names the fix. Never a 0 reward: the code reward refuses to run."""


class SettingError(ValueError):
    """A generator or trainer setting that makes a check reject honest work (``top_k=0`` under a top-k
    check, bf16 weights under the exact checks, ...): names the setting and the fix."""


class DeviceError(ValueError):
    """``model.device`` names a device this machine does not have (names the device and the fix)."""


REPORTED = (ConfigError, DataError, MetricsFileError, CheckpointError, PolicyLoadError, SandboxUnavailable,
            DeviceError, SettingError)  # exit code 2


def one_line(err: BaseException) -> str:
    """The message of ``err`` as one printable line: line breaks become spaces, other control
    characters their escapes (a NUL in a config value is shown as ``\\x00``, never written)."""
    text = " ".join(str(err).split("\n"))
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def peer_text(text: str, limit: int = 600) -> str:
    """Text a peer signed (a stop reason) made safe to quote inside this node's one-line output (review r31h F10):
    every character that is not printable (line breaks, terminal escapes, bidirectional and other format characters)
    becomes a space, runs of spaces one, a double quote a single one (a quote of it stays one quote), and at most
    ``limit`` characters are kept (the rest cut, ending in "…"). The signature covers the text as sent; this is
    only how it is shown."""
    shown = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split()).replace('"', "'")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
