"""The audit index: every record's entries kept in SQL by subject (pod, job, node), so that a
history or a story is a lookup, not a replay. ``store`` reads and writes it; ``writer`` is the
child process that stores the fold's frames (started as ``python -m strata.projector.auditindex.writer``).
"""
