"""The pure fold: the Volcano scheduler cache as a deterministic function of the cache log.

Everything the cache computes lives here and nowhere else: the state and its kinds, tasks and
resources, the canonical snapshot, hypernodes, the copy-on-write maps and layered views that make
snapshots O(1), the state's codec, delta and digest, the audit entries of each record, the
explanation behind `strata why`, and Volcano's queue gauges. It imports the schemas and
``strata.errors`` only: no Kafka, SQL, Kubernetes client, clock, file or socket (``pyproject.toml``'s
import contracts and ``tests/fold/``, whose tests fail on any file or socket opened from here).
"""
