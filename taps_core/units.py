"""Units shared by the engine and the dashboard: bytes in a GiB and in a GB."""

GiB = 2**30  # bytes
GB = 1e9  # bytes (bandwidths are quoted in GB/s)


def fmt_seconds(s: float) -> str:
    """Seconds for people: s, ms or µs with three significant digits."""
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def fmt_bytes(b: float) -> str:
    """Bytes for people: TB, GB, MB, kB (powers of 1000) or B."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(b) >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.0f} B"


def fmt_sig(x: float, digits: int = 2) -> str:
    """``x`` to ``digits`` significant digits, without an exponent (250, not 2.5e+02)."""
    return f"{float(f'{x:.{digits}g}'):g}"
