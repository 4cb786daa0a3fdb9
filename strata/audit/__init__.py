"""The replayable audit: what happened, and why, at any version of the cache log.

Histories and stories from the audit index (``history``), why a task waits (``why``), what changed
between two versions (``diff``), the log read back as a summary or as trace lines (``logview``).
"""
