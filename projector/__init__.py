"""The projector: the Volcano scheduler cache as a pure, deterministic fold of the cache log.

The fold itself imports no Kafka, SQL or Kubernetes client and reads no clock; the log runner
and the checkpoint store beside it are the edges.
"""
