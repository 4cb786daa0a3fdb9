"""When each version happened: the broker's stamp of its last record, from the audit index.

Every record has an entry in the index's blocks (1,024 offsets each), whose rows keep their
entries' first and last stamps; a version's exact stamp is in its block's decoded stamps. The
slider labels versions with these without asking the broker.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from sqlalchemy import select

from strata.projector.auditindex.store import BLOCK_RECORDS, AuditBlockRow, AuditIndex, Block
from strata.projector.checkpoints.interface import LogIdentity

KEPT_BLOCKS = 16


class Clock:
    def __init__(self, index: AuditIndex, log: LogIdentity) -> None:
        self.index = index
        self.log = log
        self._lock = threading.Lock()
        self._blocks: OrderedDict[int, dict[int, int]] = OrderedDict()  # first offset -> offset -> stamp

    def time_of(self, version: int) -> int | None:
        """The stamp (ms) of the record at offset ``version - 1``; None when the index lacks it."""
        if version <= 0:
            return None
        offset = version - 1
        first = offset - offset % BLOCK_RECORDS
        stamps = self._stamps(first)
        return stamps.get(offset) if stamps is not None else None

    def _stamps(self, first: int) -> dict[int, int] | None:
        with self._lock:
            found = self._blocks.get(first)
            if found is not None:
                self._blocks.move_to_end(first)
                return found
        log_id = self.index.log_id(self.log)
        with self.index.engine.connect() as conn:
            data = conn.execute(
                select(AuditBlockRow.data).where(AuditBlockRow.log_id == log_id, AuditBlockRow.first_offset == first)
            ).scalar_one_or_none()
        if data is None:
            return None
        block = Block(first, bytes(data))
        stamps = dict(zip(block.offsets, block.stamps, strict=True))
        if len(stamps) == BLOCK_RECORDS:  # a block still filling is read again next time
            with self._lock:
                self._blocks[first] = stamps
                while len(self._blocks) > KEPT_BLOCKS:
                    self._blocks.popitem(last=False)
        return stamps
