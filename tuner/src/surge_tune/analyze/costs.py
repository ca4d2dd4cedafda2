"""The request cost model the transfer rules share.

A request costs one latency plus its bytes over the bandwidth. Measured in latencies, a request of s bytes
costs 1 + s / HALF_BANDWIDTH_BYTES, where HALF_BANDWIDTH_BYTES is the size whose transfer takes as long as
the latency (latency x bandwidth: 0.5 ms x 2 GB/s = 1 MiB on a parallel file system). Merging `count`
requests into large ones saves their latencies: count / (requests + bytes / HALF_BANDWIDTH_BYTES) of the
transfer time. This weighs requests by the bytes around them: 1000 header reads of 512 bytes next to
64 GiB moved in large blocks are 1.5% of the cost, not 94% of the operations.
"""

HALF_BANDWIDTH_BYTES = 1 << 20


def latency_share(count: float, requests: float, nbytes: float) -> float:
    """Share of the transfer time spent in the latency of `count` of `requests` requests moving `nbytes`."""
    cost = requests + nbytes / HALF_BANDWIDTH_BYTES
    return min(count / cost, 1.0) if cost > 0 else 0.0
