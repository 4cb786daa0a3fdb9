"""``Layered``: a dict over a shared base, as the fold's forks keep the pods' dicts."""

from __future__ import annotations

import random

import pytest

from strata.projector.fold.layered import Layered

GONE = object()


def _same(layered: Layered[int, int], plain: dict[int, int]) -> bool:
    keys = range(-1, 64)
    return (
        dict(layered.items()) == plain
        and len(layered) == len(plain)
        and all(layered.get(k) == plain.get(k) and (k in layered) == (k in plain) for k in keys)
    )


@pytest.mark.parametrize("seed", range(8))
def test_forks_of_a_layered_dict_behave_as_copies_of_a_dict(seed: int) -> None:
    """Random writes, removals, deltas written at once and forks (a flatten among them): every fork equals the plain
    dict it stands for, and a write to one never reaches another."""
    rng = random.Random(seed)
    pairs: list[tuple[Layered[int, int] | dict[int, int], dict[int, int]]] = [({}, {})]
    for _ in range(3000):
        i = rng.randrange(len(pairs))
        value, plain = pairs[i]
        key = rng.randrange(64)
        roll = rng.random()
        if roll < 0.05 or not isinstance(value, Layered):
            kept, fork = Layered.fork_of(value)
            pairs[i] = (kept, plain)
            pairs.append((fork, dict(plain)))
            continue
        if roll < 0.15:  # a delta written at once: some keys set, some removed
            changes = {rng.randrange(64): rng.choice([GONE, rng.randrange(1000)]) for _ in range(rng.randrange(1, 9))}
            value.write(changes, GONE)
            for k, v in changes.items():
                if v is GONE:
                    plain.pop(k, None)
                else:
                    plain[k] = v
        elif roll < 0.6:
            value[key] = rng.randrange(1000)
            plain[key] = value[key]
        elif roll < 0.8:
            assert value.pop(key, None) == plain.pop(key, None)
        elif key in plain:
            del value[key]
            del plain[key]
        else:
            with pytest.raises(KeyError):
                del value[key]
    for value, plain in pairs:
        assert isinstance(value, Layered) and _same(value, plain)


def test_a_fork_shares_the_base_and_holds_only_the_writes_since() -> None:
    base = {k: k for k in range(1000)}
    kept, fork = Layered.fork_of(base)
    assert kept.base is fork.base is base
    for k in range(10):
        kept[k] = -k
    del kept[500]
    kept, again = Layered.fork_of(kept)
    assert again.base is base and again.writes() == ({k: -k for k in range(10)}, {500})
    for k in range(200):  # past 1/8 of the base: the next fork merges the writes into a new base
        kept[k] = k + 1
    kept, last = Layered.fork_of(kept)
    assert last.base is not base and last.writes() == ({}, set()) and base[0] == 0 and again[0] == 0
    assert kept[0] == 1 and 500 not in kept and len(kept) == 999
