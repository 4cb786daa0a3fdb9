"""The Avro ``zstandard`` codec for fastavro, on the ``zstandard`` package Strata already uses.

fastavro 1.13 wants ``backports.zstd`` for this codec on Python < 3.14; instead of another
dependency, its block reader and writer are registered here (``fastavro._write.BLOCK_WRITERS``,
``fastavro.read.BLOCK_READERS``). A block is the Avro spec's: a long (zigzag varint) with the
compressed size, then one zstd frame, so any Avro implementation reads these files.
"""

from __future__ import annotations

import io
from typing import BinaryIO

import fastavro._write
import fastavro.read
import zstandard

LEVEL = 3


def _write_long(fo: BinaryIO, n: int) -> None:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    fo.write(out)


def _read_long(fo: BinaryIO) -> int:
    shift, n = 0, 0
    while True:
        b = fo.read(1)
        if not b:
            raise EOFError("truncated block length")
        n |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return (n >> 1) ^ -(n & 1)
        shift += 7


def write_block(fo: BinaryIO, block: bytes, compression_level: int | None) -> None:
    data = zstandard.ZstdCompressor(level=compression_level or LEVEL).compress(block)
    _write_long(fo, len(data))
    fo.write(data)


def read_block(fo: BinaryIO) -> io.BytesIO:
    size = _read_long(fo)
    data = fo.read(size)
    if len(data) != size:
        raise EOFError("truncated zstandard block")
    # a frame written without its content size (streaming writers) needs a reader
    return io.BytesIO(zstandard.ZstdDecompressor().decompressobj().decompress(data))


def register() -> None:
    fastavro._write.BLOCK_WRITERS["zstandard"] = write_block  # type: ignore[attr-defined]  # fastavro's _write.pyi omits it
    fastavro.read.BLOCK_READERS["zstandard"] = read_block
