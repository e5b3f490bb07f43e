"""Key/value cache layers held in buffers reserved for the positions still to come.

transformers' DynamicLayer grows by concatenation: each new position copies the whole layer, and the copy is a
little larger than the block it frees, so the allocator's heap fills with holes that the next copies do not fit
(a tail pass after a prompt repeated for ten rows held twice its cache in resident memory this way). A layer
whose buffers are reserved once writes every new position in place.

A pool decoded by fairprobe's own Llama step may hold its keys position-last (`position_last`): each key dimension's
positions next to each other, so that a step's scores (q k^T, a product over the key's dimensions) read every key
in order: 0.56-0.82 of the time of keys as written (benchmarks/engine_kernels.py), the same dot products summed in
another order. transformers' own forward is given a copy in the usual layout (`ReservedLayer.update`).

This module imports only torch and transformers.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Cache, DynamicCache
from transformers.cache_utils import DynamicLayer


def held(tensor: torch.Tensor, room: int, repeats: int = 1) -> torch.Tensor:
    """A buffer of `tensor` (B, ..., L, D) with each row `repeats` times (B * repeats rows, a row's copies next to
    each other) and `room` positions after its L."""
    rows, length = tensor.shape[0], tensor.shape[-2]
    buffer = tensor.new_empty((rows * repeats, *tensor.shape[1:-2], length + room, tensor.shape[-1]))
    buffer.view(rows, repeats, *buffer.shape[1:])[..., :length, :] = tensor.unsqueeze(1)
    return buffer


def position_last(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """An empty buffer of `shape` (..., positions, size) whose memory holds each of the last dimension's positions
    next to each other: a (..., size, positions) tensor seen transposed."""
    return like.new_empty((*shape[:-2], shape[-1], shape[-2])).transpose(-1, -2)


def is_position_last(buffer: torch.Tensor) -> bool:
    """Whether a (..., positions, size) buffer holds its positions next to each other (`position_last`)."""
    return buffer.stride(-1) != 1


def rows_in_layout(buffer: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Rows `indices` of a buffer, copied into a buffer of the same layout."""
    if is_position_last(buffer):
        return buffer.transpose(-1, -2).index_select(0, indices).transpose(-1, -2)
    return buffer.index_select(0, indices)


class ReservedLayer(DynamicLayer):
    """A DynamicLayer whose keys and values live in buffers reserved for `room` more positions: an update writes
    in place and the layer's keys and values are views of the filled part. With `repeats`, each row is held that
    many times, next to each other (as `batch_repeat_interleave` holds them)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int, repeats: int = 1) -> None:
        super().__init__()
        self._hold(held(keys, room, repeats), held(values, room, repeats), keys.shape[-2])

    @classmethod
    def over(cls, key_buffer: torch.Tensor, value_buffer: torch.Tensor, length: int) -> ReservedLayer:
        """A layer over buffers filled already up to `length` positions (a `ReservedPool`'s)."""
        layer = cls.__new__(cls)
        DynamicLayer.__init__(layer)
        layer._hold(key_buffer, value_buffer, length)
        return layer

    def _hold(self, key_buffer: torch.Tensor, value_buffer: torch.Tensor, length: int) -> None:
        self.key_buffer, self.value_buffer = key_buffer, value_buffer
        self.device, self.is_initialized = key_buffer.device, True
        self._view(length)

    def _view(self, length: int) -> None:
        self.length = length
        self.keys = self.key_buffer[..., :length, :]
        self.values = self.value_buffer[..., :length, :]

    def write(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Write the new positions after the filled part (`keys` and `values` then view them, in the buffers'
        layout)."""
        end = self.length + key_states.shape[-2]
        self.key_buffer[..., self.length : end, :] = key_states
        self.value_buffer[..., self.length : end, :] = value_states
        self._view(end)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        """Write the new positions after the filled part; the keys and values so far, the keys in the usual layout
        (SDPA runs its math kernel on keys held position-last: 0.42 s against 0.047 s for one layer of a
        2,857-token prompt)."""
        self.write(key_states, value_states)
        return (self.keys.contiguous() if is_position_last(self.key_buffer) else self.keys), self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows `indices`, in that order. Where every row that changes place comes from beyond the
        first len(indices) rows (a `compaction`), those rows are copied into the places they take and the buffers
        end after them; otherwise the buffers are copied once in the new order."""
        kept = indices.shape[0]
        moved = (indices != torch.arange(kept, device=indices.device)).nonzero().squeeze(-1)
        if bool((indices[moved] >= kept).all()):
            for buffer in (self.key_buffer, self.value_buffer):
                buffer[moved] = buffer[indices[moved]]
            self.key_buffer, self.value_buffer = self.key_buffer[:kept], self.value_buffer[:kept]
        else:
            self.key_buffer = rows_in_layout(self.key_buffer, indices)
            self.value_buffer = rows_in_layout(self.value_buffer, indices)
        self._view(self.length)


def repeat_rows(cache: Cache, repeats: int, room: int) -> Cache:
    """`cache` with each row repeated `repeats` times (its copies next to each other) and `room` more positions:
    each plain dynamic layer (or reserved one, whose buffers stay as they are) copied into a new ReservedLayer; any
    other layer (a sliding window, a static cache) is repeated as transformers repeats it and keeps its own room."""
    for i, layer in enumerate(cache.layers):  # type: ignore[attr-defined]
        if type(layer) in (DynamicLayer, ReservedLayer) and layer.is_initialized and layer.keys.numel():
            cache.layers[i] = ReservedLayer(layer.keys, layer.values, room, repeats)  # type: ignore[attr-defined]
        elif repeats > 1:
            layer.batch_repeat_interleave(repeats)
    return cache


class ReservedPool:
    """Reserved buffers for the rows of several prompt passes decoded together (`rows` in all, each layer's keys and
    values of `heads` x `size`): each pass prefills into its own block of rows (`block`), right-aligned at the longest
    pass's `length` with zeros before it where its rows are shorter (their attention mask is 0 there), and `room`
    positions after it for the longest reply; no pass's cache is copied or grown by concatenation. With
    `keys_position_last`, the keys are held position-last (`position_last`), for a decode step that reads them in
    place (llama_step.LlamaStep)."""

    def __init__(
        self,
        rows: int,
        length: int,
        room: int,
        cache: tuple[int, int, int],
        like: torch.Tensor,
        keys_position_last: bool = False,
    ) -> None:
        layers, heads, size = cache
        self.length = length
        shape = (rows, heads, length + room, size)
        self.buffers = [
            (position_last(like, shape) if keys_position_last else like.new_empty(shape), like.new_empty(shape))
            for _ in range(layers)
        ]

    def block(self, start: int, rows: int, length: int) -> Cache:
        """An empty cache for a pass of `rows` rows of `length` positions whose layers write into rows `start`.. of
        the buffers, ending at the pool's length (the positions before it zeroed)."""
        layers = []
        for pair in self.buffers:
            views = []
            for buffer in pair:
                rows_of = buffer[start : start + rows]
                rows_of[..., : self.length - length, :] = 0
                views.append(rows_of[..., self.length - length :, :])
            layers.append(ReservedLayer.over(views[0], views[1], 0))
        cache = DynamicCache()
        cache.layers = layers  # type: ignore[assignment]
        return cache

    def cache(self) -> Cache:
        """The cache of every row of the pool, filled to its length: a ReservedLayer a layer."""
        cache = DynamicCache()
        cache.layers = [ReservedLayer.over(k, v, self.length) for k, v in self.buffers]  # type: ignore[assignment]
        return cache
