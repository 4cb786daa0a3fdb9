"""Resource maps: Kubernetes ResourceLists read into exact integers (cache-semantics.md, section 2).

A resource map is a plain ``dict`` from resource name to ``int`` that is never mutated once
built: every operation returns a new one, so snapshots can share them. A key stays once any
source named it, even at 0 (the BIND fit check reads the key set); output drops zero entries.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Mapping
from typing import Any

from strata.schemas.objectjson import NumberLiteral

Resources = dict[str, int]
EMPTY: Resources = {}

INT64_MAX = 2**63 - 1
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?:(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]*))?|\.(?P<frac_only>[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?",
    re.ASCII,
)
# suffix -> (multiplier numerator, base-10 exponent): value = m * 10**e
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_WHITESPACE = " \t\r\n"


class BadQuantity(ValueError):
    """A quantity that does not parse, is negative, or does not fit in an int64."""


def is_scalar_name(name: str) -> bool:
    """Kubernetes' IsScalarResourceName, as cache-semantics.md section 2 words it."""
    if "kubernetes.io/" in name or name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    if name.startswith("requests.") or name.count("/") != 1:
        return False
    prefix, _, part = name.partition("/")
    return (
        len(prefix) <= 253
        and _DNS_SUBDOMAIN.fullmatch(prefix) is not None
        and 1 <= len(part) <= 63
        and _NAME_PART.fullmatch(part) is not None
    )


def scale_of(name: str) -> int | None:
    """1000 for milli-scaled names, 1 for counts and bytes, None for names the cache ignores."""
    if name == "cpu":
        return 1000
    if name in ("memory", "pods"):
        return 1
    if name == "ephemeral-storage":
        return 1000
    if name.startswith("count/"):
        return None
    return 1000 if is_scalar_name(name) else None


def quantity_text(value: Any) -> str:
    """The literal text of a quantity: a JSON string, or a JSON number as written."""
    if isinstance(value, str):
        return value
    if isinstance(value, NumberLiteral):
        return value.text
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise BadQuantity(f"quantity {value!r} is not a string or a number")


def parse_quantity(value: Any, scale: int) -> int:
    """ceil(q * scale) of the quantity ``value``, exactly."""
    text = quantity_text(value).strip(_WHITESPACE)
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise BadQuantity(f"quantity {text!r} does not parse")
    frac = m["frac"] if m["frac"] is not None else (m["frac_only"] or "")
    digits = ((m["int"] or "") + frac).lstrip("0")
    if not digits:
        return 0  # any sign or exponent: zero ("-0" is not negative)
    if m["sign"] == "-":
        raise BadQuantity(f"quantity {text!r} is negative")
    suffix = m["suffix"] or ""
    if suffix in _BINARY:
        multiplier, exponent = _BINARY[suffix] * scale, -len(frac)
    elif suffix in _DECIMAL:
        multiplier, exponent = scale, _DECIMAL[suffix] - len(frac)
    else:
        multiplier, exponent = scale, exponent_of(suffix[1:]) - len(frac)
    # value = digits * multiplier * 10**exponent. Bound its number of decimal digits first, so
    # that "1e999999" or a 5000-digit literal never builds a huge integer.
    width = len(digits) + len(str(multiplier))
    if width - 1 + exponent > 20:
        raise BadQuantity(f"quantity {text!r} is out of range")
    if width + exponent < -5:
        return 1  # a positive value below one unit rounds up to one
    stored = _ceil_scaled(digits, multiplier, exponent)
    if stored > INT64_MAX:
        raise BadQuantity(f"quantity {text!r} is out of range")
    return stored


_EXPONENT_CAP = 10**18


def exponent_of(text: str) -> int:
    """The exponent ``[+-]?[0-9]+`` of a number, as an int whose magnitude is capped at 10**18.

    ``int()`` raises ValueError (not BadQuantity) on more than 4300 digits, so ``1e<5000 nines>``
    crashed the fold. No text has 10**18 characters, so every comparison of the capped exponent
    with digit counts comes out as with the exact one: the result is the same.
    """
    digits = text.lstrip("+-").lstrip("0")
    value = _EXPONENT_CAP if len(digits) > 18 else int(digits or "0")
    return -value if text[:1] == "-" else value


def _ceil_scaled(digits: str, multiplier: int, exponent: int) -> int:
    """ceil(int(digits) * multiplier * 10**exponent), exactly, in time linear in the digits.

    A short literal goes through int(). A long one (only a negative exponent lets one through
    the range check) goes through decimal: int() refuses more than 4300 digits, or fewer when
    PYTHONINTMAXSTRDIGITS says so (and then readers would disagree), and converting piecewise
    takes quadratic time (42 s for the 4 million digits an 8 MiB record can hold).
    """
    if len(digits) <= 600:  # below any limit PYTHONINTMAXSTRDIGITS can set (640 at the least)
        numerator = int(digits) * multiplier
        # typeshed types int ** int as Any (a negative exponent gives a float); both are >= 0 here
        ceiled: int = numerator * 10**exponent if exponent >= 0 else -((-numerator) // 10**-exponent)
        return ceiled
    exact = decimal.Context(
        prec=len(digits) + len(str(multiplier)) + 1,
        Emax=decimal.MAX_EMAX,
        Emin=decimal.MIN_EMIN,
        traps=[decimal.Inexact, decimal.Overflow, decimal.Underflow, decimal.InvalidOperation],
    )
    scaled = exact.scaleb(exact.multiply(decimal.Decimal(digits), multiplier), exponent)
    return int(scaled.to_integral_value(rounding=decimal.ROUND_CEILING, context=exact))


_parsed: dict[tuple[Any, ...], Resources] = {}
_PARSED_MAX = 1 << 16


def parse_resources(values: Any) -> Resources:
    """R(values): every entry parsed (ignored names too), stored under the names the cache keeps.

    The same few request maps recur across thousands of pods, so results are memoized; a result
    is shared and must never be mutated (every caller builds new maps from it).
    """
    if values is None:
        return EMPTY
    if type(values) is not dict:
        raise BadQuantity("a resource list is not an object")
    for quantity in values.values():
        if type(quantity) is not str:
            # Only all-string lists are memoized: as dict keys True == 1 and False == 0, and a
            # boolean must stay a bad quantity.
            return _parse_resources(values)
    key = tuple(values.items())
    out = _parsed.get(key)
    if out is None:
        out = _parse_resources(values)
        if len(_parsed) >= _PARSED_MAX:
            _parsed.clear()
        _parsed[key] = out
    return out


_entries: dict[tuple[str, str], int | None] = {}  # (name, quantity text) -> stored value, None when ignored


def _parse_resources(values: dict[str, Any]) -> Resources:
    out: Resources = {}
    for name, quantity in values.items():
        if quantity is None:
            continue
        key = (name, quantity)
        stored = _entries.get(key, _MISSING) if type(quantity) is str else _MISSING
        if stored is _MISSING:
            scale = scale_of(name)
            stored = parse_quantity(quantity, scale or 1)
            if scale is None:
                stored = None
            if type(quantity) is str:
                if len(_entries) >= _PARSED_MAX:
                    _entries.clear()
                _entries[key] = stored
        if stored is not None:
            out[name] = stored
    return out


_MISSING: Any = object()


def nonzero(r: Mapping[str, int]) -> dict[str, int]:
    """The output form: only non-zero entries."""
    return {k: v for k, v in r.items() if v}
