#!/bin/sh
# What apache/kafka's image has at this path, for compose.yaml's health check: exit 0 once the
# broker answers an ApiVersions request.
set -f
exec java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties \
  -cp /opt/kafka/libs/* org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
