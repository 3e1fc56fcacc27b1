"""A KV cache that is written in place, for the token-by-token sampler.

transformers' :class:`~transformers.DynamicCache` grows by ``torch.cat`` at every decoding step, so
step t copies the whole cache of every layer (at 32 rows × 260 positions that is about 380 MB a
step for SmolLM2-135M, a quarter of the sampler's time in the profile of ``BENCHMARKS.md``).
:class:`PreallocatedCache` allocates each layer's keys and values once, ``(rows, heads, capacity,
head_dim)``, writes every new position into its slot and hands attention views of the filled part
(no copy). Its :class:`~transformers.StaticCache` cousin does not fit this sampler: its batch size
is fixed at allocation, it has no row selection, and attention always runs over the full capacity.

Finished rows leave the batch by *moving*, not by selecting: the last live rows are copied into
the holes the finished rows leave (:meth:`PreallocatedCache.drop_rows`), so a step where r rows
finish copies r rows' cache, not all of it. Rows therefore change order; the caller keeps the
permutation that :meth:`drop_rows` returns.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer


def compaction(done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Which rows move where when the rows flagged ``done`` leave a batch.

    Live rows at or past the new size ``m`` (the number of live rows) move into the finished rows
    below ``m``; every other live row stays put.

    Args:
        done: (n,) bool, True for rows that leave.

    Returns:
        (holes, sources, m): long tensors of equal length; row ``sources[i]`` moves to row
        ``holes[i]``; afterwards rows ``[0, m)`` are exactly the live rows.
    """
    m = int((~done).sum())
    holes = done[:m].nonzero().squeeze(1)
    sources = (~done[m:]).nonzero().squeeze(1) + m
    return holes, sources, m


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in preallocated buffers ``(rows, heads, capacity, head_dim)``.

    ``self.keys`` / ``self.values`` are views of the first ``rows`` rows and ``length`` positions,
    as :class:`~transformers.cache_utils.DynamicLayer` would hold them, so masks and attention see a
    cache of the usual shape.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):
        super().__init__()
        rows, heads, length, _ = keys.shape
        if capacity < length:
            raise ValueError(f"capacity {capacity} is smaller than the {length} cached positions")
        self.device = keys.device
        self._k = keys.new_empty((rows, heads, capacity, keys.shape[-1]))
        self._v = values.new_empty((rows, heads, capacity, values.shape[-1]))
        self._k[:, :, :length] = keys
        self._v[:, :, :length] = values
        self.rows, self.length, self.capacity = rows, length, capacity
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys = self._k[: self.rows, :, : self.length]
        self.values = self._v[: self.rows, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write ``q`` new positions in place; returns views of all cached positions.

        Raises:
            ValueError: the batch does not match the cache rows, or the capacity is exhausted.
        """
        rows, _, q, _ = key_states.shape
        if rows != self.rows:
            raise ValueError(f"cache holds {self.rows} rows but the step has {rows}")
        if self.length + q > self.capacity:
            raise ValueError(f"cache capacity {self.capacity} exhausted ({self.length} + {q} positions)")
        self._k[:rows, :, self.length : self.length + q] = key_states
        self._v[:rows, :, self.length : self.length + q] = value_states
        self.length += q
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.capacity

    def move_rows(self, holes: torch.Tensor, sources: torch.Tensor, rows: int) -> None:
        """Copy rows ``sources`` into rows ``holes`` (filled positions only) and keep ``rows`` rows."""
        if len(holes):
            self._k[holes, :, : self.length] = self._k[sources, :, : self.length]
            self._v[holes, :, : self.length] = self._v[sources, :, : self.length]
        self.rows = rows
        self._views()

    def write_rows(self, rows: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Overwrite the last ``keys.shape[2]`` filled positions of ``rows`` (a refilled row's prompt).

        Args:
            rows: (r,) long cache rows; keys / values: (r, heads, q, head_dim), q ≤ the filled length.
        """
        q = keys.shape[2]
        self._k[rows, :, self.length - q : self.length] = keys
        self._v[rows, :, self.length - q : self.length] = values

    def drop_columns(self, begin: int, count: int) -> None:
        """Remove positions ``[begin, begin + count)`` of every row by shifting the later ones left.

        Keys carry their rotary position already, so where a key sits changes nothing but the
        order attention sums in; the caller shifts its attention mask the same way.
        """
        end = self.length
        if count:
            self._k[: self.rows, :, begin : end - count] = self._k[: self.rows, :, begin + count : end].clone()
            self._v[: self.rows, :, begin : end - count] = self._v[: self.rows, :, begin + count : end].clone()
            self.length -= count
            self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep rows ``indices`` (a copy of the kept rows; :meth:`move_rows` copies fewer)."""
        kept_k, kept_v = self.keys[indices], self.values[indices]
        self.rows = len(indices)
        self._k[: self.rows, :, : self.length] = kept_k
        self._v[: self.rows, :, : self.length] = kept_v
        self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a preallocated cache cannot grow its rows")


class PreallocatedCache(Cache):
    """A cache of :class:`PreallocatedLayer`, built from a filled prefill cache.

    Args:
        prefill: a :class:`~transformers.DynamicCache` after the prompt forward (plain full
            attention layers only, see :func:`supports`).
        rows: (n,) long, the prefill row each cache row copies (completions of one prompt share it).
        capacity: positions each row can hold (prompt width + new tokens).

    Raises:
        ValueError: the prefill cache has layers other than plain full attention.
    """

    def __init__(self, prefill: DynamicCache, rows: torch.Tensor, capacity: int):
        if not supports(prefill):
            raise ValueError("PreallocatedCache needs a prefill cache of plain full-attention layers")
        super().__init__(layers=[PreallocatedLayer(layer.keys[rows], layer.values[rows], capacity)
                                 for layer in prefill.layers])

    def drop_rows(self, done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Remove the rows flagged ``done`` by moving the last live rows into their places.

        Args:
            done: (rows,) bool on the cache's device.

        Returns:
            The move (see :func:`compaction`): apply it to every per-row tensor the caller keeps.
        """
        holes, sources, m = compaction(done)
        for layer in self.layers:
            layer.move_rows(holes, sources, m)
        return holes, sources, m

    def refill(self, rows: torch.Tensor, source: list[tuple[torch.Tensor, torch.Tensor]],
               source_rows: torch.Tensor) -> None:
        """Put new prompts into finished rows: all positions of ``source`` rows ``source_rows`` become
        the last filled positions of cache ``rows`` (continuous batching).

        Positions before them keep the previous occupant's keys: the caller masks them out.

        Args:
            rows, source_rows: (r,) long.
            source: per layer, (keys, values) of shape (D, heads, q, head_dim), q at most the filled
                length of this cache.
        """
        for layer, (keys, values) in zip(self.layers, source):
            layer.write_rows(rows, keys[source_rows], values[source_rows])

    def drop_columns(self, begin: int, count: int) -> None:
        """Remove positions ``[begin, begin + count)`` of every row (see :meth:`PreallocatedLayer.drop_columns`)."""
        for layer in self.layers:
            layer.drop_columns(begin, count)


def bytes_per_row(config, positions: int, dtype_bytes: int = 4) -> int:
    """Memory one sampled completion holds while it decodes: its KV cache and its logits row.

    Args:
        config: the model's transformers config (layers, key/value heads, head size, vocabulary).
        positions: prompt width + new tokens (the cache capacity).

    Returns:
        Bytes: layers × 2 × kv_heads × head_dim × positions × dtype_bytes for the cache, plus three
        float32 vocabulary rows (logits, their float copy, top-k scratch).
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return text.num_hidden_layers * 2 * kv_heads * head_dim * positions * dtype_bytes + 3 * 4 * text.vocab_size


def rows_for_memory(config, positions: int, budget_bytes: int, dtype_bytes: int = 4) -> int:
    """The most completions that decode together within ``budget_bytes`` (at least 1).

    See :func:`bytes_per_row`; pass the result as ``sample(..., max_rows=...)``.
    """
    return max(1, budget_bytes // bytes_per_row(config, positions, dtype_bytes))


def plain_layers(config) -> bool:
    """True when a model of ``config`` builds a cache of plain full-attention layers only (so its
    sampler can use :class:`PreallocatedCache`; sliding windows and linear attention cannot)."""
    layers = DynamicCache(config=config).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def supports(cache: Cache) -> bool:
    """True when every layer of a filled ``cache`` is a plain full-attention :class:`DynamicLayer`."""
    return bool(cache.layers) and all(type(layer) is DynamicLayer and layer.is_initialized for layer in cache.layers)
