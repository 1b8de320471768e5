"""A KV cache with room for the tokens still to be generated (decode-loop speed).

Hugging Face's ``DynamicLayer`` appends each decode step's key and value with ``torch.cat``, which
copies the whole cache of every layer at every step: for CID's 32 rows of ~240 positions on the
default model that is ~350 MB of copying per generated token, about a tenth of a CPU decode step.
:func:`give_room` turns the layers of a prefilled ``DynamicCache`` into :class:`RoomyLayer` s
whose keys and values are views of a buffer with room for ``room`` more positions; a step then
writes its one new position in place. Keys, values and attention inputs hold the same numbers as
with ``torch.cat``: only where they live in memory changes.
"""

from __future__ import annotations

from typing import Any

import torch

try:  # transformers >= 4.56: caches made of per-layer objects
    from transformers.cache_utils import DynamicLayer
except ImportError:  # pragma: no cover - older transformers keep plain per-layer lists
    DynamicLayer = None


if DynamicLayer is not None:

    class RoomyLayer(DynamicLayer):
        """A ``DynamicLayer`` whose ``keys``/``values`` are the first positions of preallocated
        buffers ``[batch, heads, capacity, head_dim]``. Out of room (or after anything replaced
        ``keys``), the next update moves the cache into a new buffer with room again."""

        keys: torch.Tensor  # set from the first update on (give_room takes initialised layers)
        values: torch.Tensor

        def __init__(self, layer: DynamicLayer, room: int) -> None:
            super().__init__()
            self.__dict__.update({k: v for k, v in vars(layer).items()
                                  if k not in ("keys", "values")})
            self.room = max(int(room), 1)
            assert layer.keys is not None and layer.values is not None  # give_room checked
            self._seat(layer.keys, layer.values, self.room)

        def _seat(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
            n = keys.shape[-2]
            self._kbuf = keys.new_empty((*keys.shape[:-2], n + room, keys.shape[-1]))
            self._vbuf = values.new_empty((*values.shape[:-2], n + room, values.shape[-1]))
            self._kbuf[..., :n, :] = keys
            self._vbuf[..., :n, :] = values
            self._set(n)

        def _set(self, n: int) -> None:
            self.keys = self._kbuf[..., :n, :]
            self.values = self._vbuf[..., :n, :]
            self._seen = (self.keys, self.values)

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            n, q = self.keys.shape[-2], key_states.shape[-2]
            if (self.keys is not self._seen[0] or self.values is not self._seen[1]
                    or n + q > self._kbuf.shape[-2]):
                self._seat(self.keys, self.values, max(q, self.room))
            self._kbuf[..., n:n + q, :] = key_states
            self._vbuf[..., n:n + q, :] = value_states
            self._set(n + q)
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """Keep the rows ``indices`` (finished examples leave the batch), room included."""
            n = self.keys.shape[-2]
            if self.keys is not self._seen[0] or self.values is not self._seen[1]:
                self._seat(self.keys, self.values, self.room)
            self._kbuf, self._vbuf = self._kbuf[indices], self._vbuf[indices]
            self._set(n)


def give_room(cache: Any, room: int) -> bool:
    """Give every layer of a prefilled ``DynamicCache`` room for ``room`` more positions, in
    place. Caches of other kinds (sliding windows, quantised, older transformers) are left as
    they are; returns whether the cache was changed."""
    layers = getattr(cache, "layers", None)
    if DynamicLayer is None or room < 1 or not layers:
        return False
    if any(type(layer) is not DynamicLayer or not layer.is_initialized
           or layer.keys is None or layer.keys.dim() != 4 for layer in layers):
        return False
    for i, layer in enumerate(layers):
        layers[i] = RoomyLayer(layer, room)
    return True
