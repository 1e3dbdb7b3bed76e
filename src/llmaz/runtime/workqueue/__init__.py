"""Work queues in client-go's layers (`Queue` <- `DelayingQueue` <- `RateLimitingQueue`) and rate limiters."""

from llmaz.runtime.workqueue.delaying import DelayingQueue
from llmaz.runtime.workqueue.queue import Queue, QueueShutDownError
from llmaz.runtime.workqueue.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    RateLimitingQueue,
    default_controller_rate_limiter,
)

__all__ = [
    "BucketRateLimiter",
    "DelayingQueue",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "Queue",
    "QueueShutDownError",
    "RateLimiter",
    "RateLimitingQueue",
    "default_controller_rate_limiter",
]
