"""txn.bounded: the wait that keeps a worker or the dispatcher polling when librdkafka's
send_offsets_to_transaction blocks past its own timeout (after a broker loss)."""

from __future__ import annotations

import threading
import time

import pytest

from strata.binder import txn


def test_an_answer_in_time_is_the_answer() -> None:
    done: list[int] = []
    txn.bounded(lambda: done.append(1), 5.0, "quick")
    assert done == [1]


def test_its_error_reaches_the_caller() -> None:
    def fenced() -> None:
        raise txn.Abort("the transaction aborted")

    with pytest.raises(txn.Abort, match="aborted"):
        txn.bounded(fenced, 5.0, "fenced")


def test_a_call_that_hangs_gives_the_producer_up_in_time() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(txn.Fatal, match=r"send_offsets_to_transaction did not return in 0\.2 s"):
        txn.bounded(lambda: release.wait(30), 0.2, "send_offsets_to_transaction")
    assert time.monotonic() - started < 5
    release.set()
