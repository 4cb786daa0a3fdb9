"""Prometheus counters of the command side (the dispatcher and the workers)."""

from prometheus_client import Counter

DISPATCHED = Counter("strata_commands_dispatched", "Commands produced by the dispatcher, by work.", ["work"])
OUTCOMES = Counter(
    "strata_command_outcomes", "Outcome records written to the cache log, by work and outcome.", ["work", "outcome"]
)
RETRIES = Counter(
    "strata_command_retries", "Commands forwarded to a retry tier, by work and tier topic.", ["work", "topic"]
)
DEAD_LETTERS = Counter(
    "strata_command_dead_letters", "Commands sent to the dead-letter topic, by work and cause.", ["work", "cause"]
)
BAD_COMMANDS = Counter(
    "strata_bad_commands", "Command messages that did not decode (dead-lettered), by topic.", ["topic"]
)
ABORTS = Counter("strata_command_transaction_aborts", "Transactions aborted and redone, by role.", ["role"])
FOUND_DONE = Counter(
    "strata_commands_found_done",
    "Suspect commands (an earlier attempt may have done them) that the pod showed done: no API write.",
    ["work"],
)
