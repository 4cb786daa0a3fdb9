"""JSON-shaped values for the property tests that hold a fast encoder or parser to the stdlib's."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from strata.schemas.objectjson import NumberLiteral

INTEGERS = st.integers(min_value=-(10**40), max_value=10**40)
LITERALS = st.builds(NumberLiteral, st.sampled_from(["2.50", "1e3", "-0.0", "1E+400"]))
FLOATS = st.floats(allow_nan=False, allow_infinity=False)


def json_values(*scalars: st.SearchStrategy[Any], tuples: bool = False) -> st.SearchStrategy[Any]:
    """None, booleans, integers, text and ``scalars``, nested in lists and dicts (and tuples)."""
    leaves = st.one_of(st.none(), st.booleans(), INTEGERS, st.text(), *scalars)

    def nest(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        containers = st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
        return containers | st.tuples(children, children) if tuples else containers

    return st.recursive(leaves, nest, max_leaves=25)
