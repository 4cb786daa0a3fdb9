"""What a scheduler replica embeds: the Cache interface on the cache log, and an example scheduler."""

from strata.scheduler.interface import BindContext, BindResult, Cache, EvictResult, JobStatus, QueueStatus

__all__ = ["BindContext", "BindResult", "Cache", "EvictResult", "JobStatus", "QueueStatus"]
