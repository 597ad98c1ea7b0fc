"""Units shared by the engine and the dashboard: bytes in a GiB and in a GB."""

GiB = 2**30  # bytes
GB = 1e9  # bytes (bandwidths are quoted in GB/s)
