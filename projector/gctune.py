"""The cyclic garbage collector's settings for a process that folds the cache log.

The fold allocates and frees a few dozen containers per record (the parsed JSON of the record,
the views derived from it), keeps a growing state of millions of tracked objects, and makes
almost no reference cycles (a few hundred objects in a 1.7-million-record replay). With the
default thresholds (700, 10, 10) the collector ran 670 young and 5 full collections over that
replay, 0.9 s of its 27.7 s (3.3 %), to free those few hundred objects; with these it spends
0.16 s. Full collections still come, once the young ones have promoted enough; reference
counting frees everything else as before, so memory does not change.
"""

from __future__ import annotations

import gc

FOLD_THRESHOLDS = (50_000, 20, 100)

# What a follower of the log keeps lives on (the state's new objects; a projector's audit entries
# until its writer takes them), so every FREEZE_EVERY records it is moved out of the collector's
# passes, as a restored state is at once: the middle and full collections otherwise walk every
# object folded since the last freeze, again and again. Reference counting still frees what
# is frozen; only a reference cycle made between two freezes is never collected, and the fold
# makes almost none (see above).
FREEZE_EVERY = 65_536


def freeze_kept(version: int) -> None:
    """Call after a follower applies the record that brings it to ``version``: at every
    FREEZE_EVERY-th version, what it holds leaves the collector's passes."""
    if version % FREEZE_EVERY == 0:
        gc.freeze()


def tune_for_fold() -> None:
    """Set the thresholds for the rest of the process: call once, before a long fold (a replay,
    a projector catching up and following the log)."""
    gc.set_threshold(*FOLD_THRESHOLDS)
