#!/usr/bin/env bash
# The main job: start the local stack, publish the sample cluster history into a fresh cache
# log, read it back and print a summary.
source "$(dirname "$0")/bootstrap.sh"
eval "$(strata dev up --no-kube)"  # the demo needs only Kafka
strata demo
