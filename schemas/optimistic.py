"""The optimistic reader of a whole message: the first try of ``codec``'s field and record readers.

Before its object, a cache-log message holds short ASCII strings (a kind, a namespace, a name, a
uid, a resource version), each with a length of one byte. The generated full reader
(``codec._generate``) pays per string for a varint's branches, a bounds check and a strict UTF-8
decode: most of reading a WatchEvent beyond the fold. This reader assumes the common case and
checks it wholesale instead:

* a string's length is one byte, even and below 0x80 (a zigzag varint of a length below 64);
* an enum's index and a union's branch are one byte, in range; a map of strings is empty;
* each run of such fields (ended by a long or a bytes field, whose bytes may be anything) is
  ASCII as a whole, so each string in it is valid UTF-8 (ASCII bytes cannot continue a
  multi-byte character);
* the message ends where its last field does. Positions only grow, so no field overran it.

Anything else raises (``FALLBACK``, or the long reader's own error) and the full reader decides
afresh, so whatever this one returns is what the full reader returns for the same bytes;
tests/schemas/test_codec_optimistic.py holds the two equal over every message of the conformance traces
and thousands of mutations of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast


class Slow(Exception):
    """Bytes outside the common case: the full reader's to decide."""


FALLBACK = (Slow, IndexError, UnicodeDecodeError)
_ONE_BYTE_SYMBOLS = 64  # an enum whose every index is a one-byte zigzag varint


class Guard(NamedTuple):
    """What makes an optimistic reader whole: the header a message must begin with (else it
    reads as None), the reader that decides what the optimistic one cannot read (given the same
    bytes), and the exceptions that hand a message over to it."""

    header: bytes
    fallback: Callable[[Any], Any]
    deferred: tuple[type[BaseException], ...]


def optimistic(
    fields: list[dict[str, Any]],
    kept: set[int],
    tail: tuple[list[str], dict[str, Any]],
    header_size: int,
    long_at: Callable[[bytes, int], tuple[int, int]],
    guard: Guard | None = None,
) -> Callable[[bytes], Any] | None:
    """A reader of a whole message of ``fields`` into the locals f0, f1, ... (of the fields
    ``kept``: the others are checked, not read) that ends with ``tail``'s statements (what
    they return is the reader's; the constants they use beside them), as ``codec._generate``'s;
    None where a field's type has no optimistic form. ``long_at(data, pos)`` reads a varint
    of three bytes or more: (its value, the position after).

    Without a ``guard`` the reader raises (``FALLBACK``) where it cannot read; with one it
    checks the header itself and hands anything else to the guard's fallback: one call a
    message where a wrapper around it took two (a tenth of reading a WatchEvent's fields)."""
    source = _Source(kept)
    try:
        for i, f in enumerate(fields):
            source.field(i, f["type"])
    except Slow:
        return None
    body = [f"    pos = {header_size}", "    s0 = pos", *source.lines]
    body += [f"    e{source.run} = pos", "    if pos != len(data):", "        raise Slow"]
    runs = " and ".join(f"data[s{k}:e{k}].isascii()" for k in range(source.run + 1))
    body += [f"    if not ({runs}):", "        raise Slow", *(f"    {line}" for line in tail[0])]
    namespace: dict[str, Any] = {"Slow": Slow, "_long": long_at, **tail[1], **source.constants}
    if guard is None:
        lines = ["def read(data):", *body]
    else:
        namespace.update(_header=guard.header, _fallback=guard.fallback, _deferred=guard.deferred)
        lines = [
            "def read(data):",
            "    if type(data) is not bytes or not data.startswith(_header):",
            "        return None",
            "    try:",
            *(f"    {line}" for line in body),
            "    except _deferred:",
            "        return _fallback(data)",
        ]
    exec(compile("\n".join(lines) + "\n", "<strata.schemas.optimistic reader>", "exec"), namespace)
    return cast(Callable[[bytes], Any], namespace["read"])


class _Source:
    """The reader's lines: f0, f1, ... as locals; ``run`` the number of the ASCII run being read
    (its start ``s<run>``, its end ``e<run>`` once a field that may hold any byte ends it)."""

    def __init__(self, kept: set[int]) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.run = 0
        self.kept = kept  # the fields returned: the others' strings are checked, not decoded

    def field(self, i: int, schema: Any) -> None:
        target = f"f{i}" if i in self.kept else None
        if _breaks_run(schema):
            self.lines.append(f"    e{self.run} = pos")
            self.run += 1
            self.emit(target, schema, "    ")
            self.lines.append(f"    s{self.run} = pos")
        else:
            self.emit(target, schema, "    ")

    def emit(self, target: str | None, schema: Any, indent: str) -> None:
        """Read one value into ``target`` (None: past it)."""
        kind = _kind(schema)
        add = self.lines.append
        if kind == "null":
            add(f"{indent}{target} = None" if target is not None else f"{indent}pass")
        elif kind == "string":
            add(f"{indent}b = data[pos]")
            add(f"{indent}if b & 0x81:")  # odd (negative) or a second byte follows
            add(f"{indent}    raise Slow")
            add(f"{indent}start = pos + 1")
            add(f"{indent}pos = start + (b >> 1)")
            if target is not None:  # else checked with its run
                add(f"{indent}{target} = data[start:pos].decode()")
        elif kind in ("long", "bytes"):
            self._varint("n" if kind == "bytes" or target is None else target, indent)
            if kind == "bytes":
                add(f"{indent}if n < 0:")
                add(f"{indent}    raise Slow")
                if target is not None:
                    add(f"{indent}{target} = data[pos : pos + n]")
                add(f"{indent}pos += n")
        elif kind == "enum" and len(schema["symbols"]) <= _ONE_BYTE_SYMBOLS:
            symbols = f"symbols{len(self.constants)}"
            self.constants[symbols] = tuple(schema["symbols"])
            add(f"{indent}b = data[pos]")
            add(f"{indent}if b & 1 or b >= {2 * len(schema['symbols'])}:")
            add(f"{indent}    raise Slow")
            if target is not None:
                add(f"{indent}{target} = {symbols}[b >> 1]")
            add(f"{indent}pos += 1")
        elif kind == "map" and schema.get("values") == "string":
            add(f"{indent}if data[pos]:")  # a block of entries follows: the full reader's
            add(f"{indent}    raise Slow")
            add(f"{indent}pos += 1")
            if target is not None:
                add(f"{indent}{target} = {{}}")
        elif isinstance(schema, list) and 0 < len(schema) < _ONE_BYTE_SYMBOLS:
            add(f"{indent}b = data[pos]")
            add(f"{indent}pos += 1")
            for i, branch in enumerate(schema):
                add(f"{indent}{'if' if i == 0 else 'elif'} b == {2 * i}:")
                self.emit(target, branch, indent + "    ")
            add(f"{indent}else:")
            add(f"{indent}    raise Slow")
        else:
            raise Slow  # a record, an array, a logical type: the full reader alone

    def _varint(self, target: str, indent: str) -> None:
        self.lines += varint_lines(target, indent)


def varint_lines(target: str, indent: str) -> list[str]:
    """Source that reads a zigzag varint at ``pos`` into ``target`` and moves ``pos`` past it:
    one or two bytes inline, more through ``_long`` (the full generated reader's too)."""
    # Two bytes inline as well: the length of every object the log carries (64 bytes to 8 KiB)
    # would otherwise cost a call of ``_long``, a tenth of reading a watch event.
    return [
        f"{indent}b = data[pos]",
        f"{indent}if b < 0x80:",
        f"{indent}    {target} = (b >> 1) ^ -(b & 1)",
        f"{indent}    pos += 1",
        f"{indent}elif data[pos + 1] < 0x80:",
        f"{indent}    b = (b & 0x7F) | (data[pos + 1] << 7)",
        f"{indent}    {target} = (b >> 1) ^ -(b & 1)",
        f"{indent}    pos += 2",
        f"{indent}else:",
        f"{indent}    {target}, pos = _long(data, pos)",
    ]


def _kind(schema: Any) -> Any:
    if isinstance(schema, dict) and len(schema) == 1:
        schema = schema["type"]  # {"type": "string"} is "string"
    if isinstance(schema, dict):
        return "logical" if "logicalType" in schema else schema.get("type")
    return schema


def _breaks_run(schema: Any) -> bool:
    """Whether the field's bytes may be any byte (a long's varint, a bytes field's content)."""
    if isinstance(schema, list):
        return any(_breaks_run(branch) for branch in schema)
    return _kind(schema) in ("long", "bytes")
