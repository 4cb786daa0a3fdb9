"""Disaster recovery by replay: the cache log exported to archives and restored from them
(``archive``, with the container files' ``codec`` and the ``manifest``), and ``verify``: the log's
snapshot against the cluster, an archive against its manifest, replicas against each other.
"""
