"""Small, alike byte strings kept compressed with a preset dictionary learned from the first ones.

zlib alone barely shrinks a few hundred bytes: its window starts empty. Histories of orchestration
instances, or the status messages left on the submitters' queues, are small and alike (the same
field names, event types, queue names), so a dictionary made of the first few compresses the rest
3 to 4 times smaller. A dictionary is learned once and never changes after, so every string packed
with it can be unpacked with it."""

from __future__ import annotations

import threading
import zlib

_PLAIN = 0  # the first byte of a packed string: the bytes as they came
_ZLIB = 1  # zlib without a dictionary (while the dictionary is being learned)
_WITH_DICTIONARY = 2  # zlib with the learned dictionary

_WINDOW = 32 * 1024  # the most of a dictionary zlib uses


class LearnedDictionary:
    """``pack`` a byte string into a compressed one (with a leading byte saying how); ``unpack``
    gives back the same bytes. The first ``learn_from`` strings packed are kept as samples (packed
    without a dictionary); the dictionary is their concatenation, at most zlib's window."""

    def __init__(self, learn_from: int) -> None:
        self._learn_from = learn_from
        self._lock = threading.Lock()
        self._samples: list[bytes] = []
        self._data: bytes | None = None

    @property
    def learned(self) -> bool:
        return self._data is not None

    def pack(self, raw: bytes) -> bytes:
        with self._lock:
            data = self._data
            if data is None:
                self._samples.append(raw)
                if len(self._samples) >= self._learn_from:
                    self._data = b"".join(self._samples)[-_WINDOW:]
                    self._samples = []
        if data is None:
            squeezed = zlib.compress(raw)
            return bytes([_ZLIB]) + squeezed if len(squeezed) < len(raw) else bytes([_PLAIN]) + raw
        packer = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zdict=data)
        squeezed = packer.compress(raw) + packer.flush()
        return bytes([_WITH_DICTIONARY]) + squeezed if len(squeezed) < len(raw) else bytes([_PLAIN]) + raw

    def unpack(self, packed: bytes) -> bytes:
        how = packed[0]
        if how == _PLAIN:
            return packed[1:]
        if how == _ZLIB:
            return zlib.decompress(packed[1:])
        if self._data is None:
            raise RuntimeError("bytes packed with a dictionary this one never learned")
        unpacker = zlib.decompressobj(zdict=self._data)
        return unpacker.decompress(packed[1:]) + unpacker.flush()
