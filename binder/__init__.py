"""Binders and evictors: consumers that carry out admitted BIND and applied EVICT commands
against the Kubernetes API and write each outcome back into the cache log."""
