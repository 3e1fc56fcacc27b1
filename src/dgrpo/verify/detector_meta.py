"""``detector.json`` of a trained detector: its validated fields and the base-weights fingerprint.

Split from :mod:`dgrpo.verify.detector` (docs/detector.md). :func:`read_meta` needs neither torch nor
transformers, so a config check reads a detector folder in well under a second; the fingerprint
functions take a loaded model.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from pydantic import ConfigDict, Field, ValidationError

from dgrpo.errors import PolicyLoadError
from dgrpo.registry import StrictConfig

TEMPLATE_VERSION = 1  # the input format of verify/detector.py (format_pair)
META_FILE = "detector.json"


class DetectorMeta(StrictConfig):
    """The fields of ``detector.json`` that loading reads, with their types and ranges (:func:`read_meta`
    validates only these; the file's other fields are kept as they are)."""

    model_config = ConfigDict(**StrictConfig.model_config, strict=True)

    base_model: str = Field(min_length=1)
    template_version: int
    max_length: int = Field(ge=16, le=8192)
    threshold: float = Field(gt=0, lt=1)
    base_shape: dict
    base_fingerprint: dict | None = None


def read_meta(out_dir: str | Path) -> dict:
    """``detector.json`` of a saved detector (no torch), validated by :class:`DetectorMeta`.

    Raises:
        PolicyLoadError: the folder is missing, has no ``detector.json``, or it is not one of this
            module (not JSON, wrong template version, missing fields, a field of the wrong type or out of
            range: threshold in (0, 1), 16 ≤ max_length ≤ 8192, base_model a non-empty string).
    """
    path = Path(out_dir).expanduser()
    if not path.is_dir():
        raise PolicyLoadError(f"detector path {str(path)!r} is not a folder; train one with "
                              f"`dgrpo detector train --data FILE.jsonl --out DIR`")
    if not (path / META_FILE).is_file():
        raise PolicyLoadError(f"detector path {str(path)!r} has no {META_FILE}: not a detector; point path at "
                              f"the --out folder of `dgrpo detector train`")
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise PolicyLoadError(f"detector path {str(path)!r}: {META_FILE} is not JSON ({err}); retrain it") from None
    if not isinstance(meta, dict):
        raise PolicyLoadError(f"detector path {str(path)!r}: {META_FILE} is not a JSON object; retrain it")
    missing = [k for k in ("base_model", "template_version", "max_length", "threshold", "base_shape") if k not in meta]
    if missing:
        raise PolicyLoadError(f"detector path {str(path)!r}: {META_FILE} lacks {', '.join(missing)}; retrain it")
    try:
        DetectorMeta.model_validate({k: v for k, v in meta.items() if k in DetectorMeta.model_fields})
    except ValidationError as err:
        e = err.errors()[0]
        raise PolicyLoadError(f"detector path {str(path)!r}: {META_FILE} field {'.'.join(map(str, e['loc']))}="
                              f"{e.get('input')!r}: {e['msg']}; restore the value `dgrpo detector train` wrote "
                              f"or retrain it") from None
    if meta["template_version"] != TEMPLATE_VERSION:
        raise PolicyLoadError(f"detector path {str(path)!r}: template_version {meta['template_version']} is not "
                              f"{TEMPLATE_VERSION} (this dgrpo's input format); retrain it")
    return meta


def _base_shape(config) -> dict:
    """The base model's shape (type, vocab, width, depth), recorded to catch another model under the same name."""
    return {k: getattr(config, k, None) for k in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers")}


_LAYER = re.compile(r"\.(?:layers|h|layer|blocks)\.(\d+)\.")
_FP_RTOL = {True: 1e-6, False: 2.0**-8 + 1e-6}  # same dtype: float64 sums agree; another dtype: bfloat16 rounding


def base_fingerprint(model) -> dict:
    """Float64 sum, L1 and L2 norms of the base model's input embedding, first and last decoder layer.

    Computed on the loaded base weights (before LoRA; the fresh ``score`` head excluded), recorded in
    ``detector.json`` and checked at load (:func:`check_fingerprint`): a base folder whose weights were
    replaced by another model of the same shape no longer matches.
    """
    import torch

    layers: dict[int, list] = {}
    for name, p in model.named_parameters():
        m = _LAYER.search("." + name)
        if m:
            layers.setdefault(int(m.group(1)), []).append(p)
    groups = {"embedding": [model.get_input_embeddings().weight]}
    if layers:
        groups |= {"first_layer": layers[min(layers)], "last_layer": layers[max(layers)]}
    out: dict = {"dtype": str(next(model.parameters()).dtype).removeprefix("torch.")}
    with torch.no_grad():
        for key, params in groups.items():
            flat = [p.detach().reshape(-1) for p in params]
            out[key] = {"sum": sum(float(torch.sum(f, dtype=torch.float64)) for f in flat),
                        "l1": sum(float(torch.linalg.vector_norm(f, 1, dtype=torch.float64)) for f in flat),
                        "l2": math.sqrt(sum(float(torch.linalg.vector_norm(f, 2, dtype=torch.float64)) ** 2
                                            for f in flat))}
    return out


def check_fingerprint(saved: dict, now: dict) -> str | None:
    """None when ``now`` matches ``saved`` (:func:`base_fingerprint`), else what differs.

    Tolerance from a per-weight relative error bound ``rtol`` (1e-6 for the same dtype; 2⁻⁸, bfloat16's
    rounding, when it loads in another): |Δl1| ≤ rtol·l1, |Δl2| ≤ rtol·l2 and |Δsum| ≤ rtol·l1.
    """
    rtol = _FP_RTOL[saved.get("dtype") == now.get("dtype")]
    for key in ("embedding", "first_layer", "last_layer"):
        if key not in saved:
            continue
        a, b = saved[key], now.get(key)
        if b is None:
            return f"{key} is missing"
        for stat, scale in (("sum", "l1"), ("l1", "l1"), ("l2", "l2")):
            if abs(a[stat] - b[stat]) > rtol * abs(a[scale]) + 1e-12:
                return f"{key} {stat} {b[stat]:.9g}, trained on {a[stat]:.9g}"
    return None
