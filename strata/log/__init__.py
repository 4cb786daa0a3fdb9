"""The Kafka edge of the cache log: settings, topics, the reader and writer of the log, errors,
metrics. Above the schemas, below everything that reads or writes the log; the CLI is not here."""
