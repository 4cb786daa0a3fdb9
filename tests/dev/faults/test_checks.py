"""The fault scenarios' checkers on outcomes made by hand: each passes a right one and reports each
kind of wrong one. (The scenarios run them on real outcomes, and on broken copies as negative
controls; here every checker meets cases a real run rarely produces.)"""

from __future__ import annotations

import pytest

from strata.dev.faults import FaultResult, Verdict, binder_crash, broker_loss, load, poison, projector_crash, watch_gaps
from strata.schemas import BindFailed, BindSucceeded


def test_a_result_without_controls_or_with_an_unseen_one_is_no_pass():
    result = FaultResult("x")
    result.count(Verdict())
    assert not result.ok  # no negative control: nothing shows that the check can fail
    result.control("seen", Verdict(lost=1))
    assert result.ok and result.controls_caught == "1/1"
    result.control("unseen", Verdict())
    assert not result.ok and "NOT detected" in result.notes[-1]


@pytest.mark.parametrize(
    ("statuses", "duplicates"),
    [
        ((201,), 0),
        ((201, 409), 1),  # done, then done again: the crash-redo the audit log exists to catch
        ((504, 201), 0),  # a retry after a call that did nothing
        ((504,), 0),  # a 504 that took effect
        ((504, 409), 1),
        ((201, 409, 409), 2),
        ((201, 429), 1),  # refused or not, it reached the API server
        ((429, 409), 0),  # a definite refusal did nothing: the 409 is someone else's bind
    ],
)
def test_binder_calls_after_the_one_that_took_effect_are_duplicates(statuses, duplicates):
    verdict = Verdict()
    binder_crash.repeated_calls(verdict, statuses, "p", "Binding", True)
    assert verdict.duplicates == duplicates
    assert verdict.clean == (duplicates == 0)


def test_binder_a_bound_pod_without_an_audited_call_is_reported():
    verdict = Verdict()
    binder_crash.repeated_calls(verdict, (), "p", "Binding", True)
    assert verdict.problems


def _binds(**changes) -> binder_crash.Observed:
    seen = binder_crash.Observed(
        placement={"u1": "n1", "u2": "n2"},
        names={"u1": "p1", "u2": "p2"},
        admitted=frozenset({"u1", "u2"}),
        bind_outcomes=(BindSucceeded(pod="u1", node="n1"), BindSucceeded(pod="u2", node="n2")),
        evicted=frozenset({"u1"}),
        evict_outcomes=frozenset({"u1"}),
        bound={"u1": "n1", "u2": "n2"},
        writes={("binding", "p1"): (201,), ("binding", "p2"): (201,), ("eviction", "p1"): (201,)},
        binding=(),
    )
    return binder_crash.Observed(**{**seen.__dict__, **changes})


@pytest.mark.parametrize(
    "broken",
    [
        {"bind_outcomes": (BindSucceeded(pod="u1", node="n1"),)},  # an outcome lost
        {"bound": {"u1": "n1", "u2": "n1"}},  # bound elsewhere than admitted
        {"bound": {"u1": "n1", "u2": None}},  # never bound
        {"bind_outcomes": (BindSucceeded(pod="u1", node="n2"), BindSucceeded(pod="u2", node="n2"))},
        {
            "bind_outcomes": (
                BindSucceeded(pod="u1", node="n1"),
                BindFailed(pod="u2"),
                BindSucceeded(pod="u2", node="n2"),
            )
        },
        {"evict_outcomes": frozenset()},
        {"binding": ("u2",)},
        {"admitted": frozenset({"u1"})},
        {"writes": {("binding", "p1"): (201,), ("binding", "p2"): (201, 409), ("eviction", "p1"): (201,)}},
        {"writes": {("binding", "p1"): (201,), ("binding", "p2"): (201,), ("eviction", "p1"): (201, 201)}},
    ],
)
def test_binder_crash_check(broken):
    assert binder_crash.check(_binds()).clean
    assert not binder_crash.check(_binds(**broken)).clean


def test_an_evicted_pod_that_is_gone_was_bound_once():
    assert binder_crash.check(_binds(bound={"u2": "n2"})).clean


def _kill(**changes) -> projector_crash.Kill:
    kill = projector_crash.Kill(run=0, phase="folding", restored=0, written=(2000,), before=0, after=2000)
    return projector_crash.Kill(**{**kill.__dict__, **changes})


def test_projector_crash_check():
    checkpoints, reference = {2000: "a", 4000: "b"}, {2000: "a", 4000: "b"}
    assert projector_crash.check([_kill()], checkpoints, reference, 4000).clean
    for kills, cps, end in (
        ([_kill()], {2000: "a", 4000: "x"}, 4000),  # a wrong checkpoint
        ([_kill()], {2000: "a"}, 4000),  # the end not reached
        ([_kill(written=(3000,))], checkpoints, 4000),  # logged as written, missing
        ([_kill(after=0)], checkpoints, 4000),  # the store lost what it wrote
        ([_kill(written=())], checkpoints, 4000),  # no progress while folding
        ([_kill(phase="finished")], checkpoints, 4000),
        ([_kill(restored=1000)], checkpoints, 4000),  # restored what no checkpoint holds
        ([_kill(restored=0, before=2000, after=4000, written=(4000,))], checkpoints, 4000),  # not the newest
    ):
        assert not projector_crash.check(kills, cps, reference, end).clean
    # a kill planned as it restores need not show progress, wherever it landed
    for phase in ("restoring", "folding"):
        kill = _kill(phase=phase, after=0, written=(), after_checkpoint=False)
        assert projector_crash.check([kill], checkpoints, reference, 4000).clean


def test_projector_crash_reads_where_a_kill_landed():
    lines = [
        "strata: strata.projector: restoring the newest checkpoint\n",
        "strata: strata.projector: restored version 2000\n",
        "strata: strata.projector: writing a checkpoint at version 4000\n",
    ]
    assert projector_crash.phase_of([], 10) == "starting"
    assert projector_crash.phase_of(lines[:1], 10) == "restoring"
    assert projector_crash.phase_of(lines[:2], 10) == "folding"
    assert projector_crash.phase_of(lines, 10) == "checkpointing"
    assert projector_crash.phase_of([*lines, "checkpoint at version 4000 written\n"], 10) == "folding"
    assert projector_crash.phase_of([*lines, "idle at version 10\n"], 10) == "finished"


def test_broker_loss_check():
    given = [b"a", b"b", b"c"]
    seen = broker_loss.Observed(given=given, sent=3, error=None, got=list(given), follower="d", reference="d")
    assert broker_loss.check(seen).clean
    assert broker_loss.check(broker_loss.Observed(**{**seen.__dict__, "got": [b"a", b"c"]})).lost == 1
    assert broker_loss.check(broker_loss.Observed(**{**seen.__dict__, "got": [b"a", b"b", b"b", b"c"]})).duplicates == 1
    assert broker_loss.check(broker_loss.Observed(**{**seen.__dict__, "got": [b"b", b"a", b"c"]})).mismatches == 1
    assert not broker_loss.check(broker_loss.Observed(**{**seen.__dict__, "error": "boom"})).clean
    assert broker_loss.check(broker_loss.Observed(**{**seen.__dict__, "sent": 2})).lost == 1
    assert broker_loss.check(broker_loss.Observed(**{**seen.__dict__, "follower": None})).mismatches == 1


def test_load_check():
    seen = load.Observed(
        published=10, log_end=10, finals=[10, 10], returncodes=[0, 0], early=[100, 100], late=[110, 100]
    )
    assert load.check(seen).clean
    assert load.check(load.Observed(**{**seen.__dict__, "finals": [9, 10]})).lost == 1
    assert load.check(load.Observed(**{**seen.__dict__, "finals": [11, 10]})).duplicates == 1
    assert load.check(load.Observed(**{**seen.__dict__, "log_end": 11, "finals": [11, 11]})).duplicates == 1
    assert load.check(load.Observed(**{**seen.__dict__, "log_end": 9, "finals": [9, 9]})).lost == 1
    assert not load.check(load.Observed(**{**seen.__dict__, "returncodes": [0, -9]})).clean
    assert not load.check(load.Observed(**{**seen.__dict__, "late": [200, 100]})).clean


def test_poison_check():
    seen = poison.Observed(
        offsets=5, poison=2, read=5, reader_records=5, counted=2, read_as_bad=2, quarantined=2,
        misread=(), lost=0, projector="d", reference="d",
    )  # fmt: skip
    assert poison.check(seen).clean
    for field, value in (
        ("read", 4), ("counted", 1), ("read_as_bad", 1), ("quarantined", 1), ("misread", ("offset 3",)),
        ("lost", 1), ("projector", "e"),
    ):  # fmt: skip
        assert not poison.check(poison.Observed(**{**seen.__dict__, field: value})).clean, field


def test_watch_gaps_names_every_change():
    found = ["jobs.ns/g.minAvailable: log 3, cluster 4", "nodes.ns-n1.labels.v: only in the cluster"]
    assert watch_gaps.seen_all(found, {"ns/g", "ns-n1"}).clean
    verdict = watch_gaps.seen_all(found, {"ns/g", "ns-n1", "uid-7"})
    assert verdict.lost == 1 and "uid-7" in verdict.problems[0]
