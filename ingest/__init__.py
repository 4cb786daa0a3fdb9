"""Sources of the cache log: watch adapters for the Kubernetes API and recorded trace files.

Everything published passes through ``redaction`` first, then the Avro codec of ``schemas``.
"""
