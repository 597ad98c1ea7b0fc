"""Strict JSON in and out: bounded size and nesting, UTF-8 only, no NaN or Infinity either way.

Reading: the file size is checked with ``stat`` before reading (and the read itself is capped),
the text must be UTF-8, the nesting depth is measured by a vectorised bracket scan *before*
:func:`json.loads` can recurse, and the non-JSON constants ``NaN``/``Infinity`` are refused.
Writing: :func:`to_strict` turns non-finite floats into ``null`` and records why, and
:func:`dumps` never emits anything a strict parser rejects.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from taps_core.errors import InvalidInputError
from taps_core.limits import LIMITS, check_size

_CHUNK = 1 << 20  # bytes scanned per vectorised step of the depth check
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_SPECIAL = np.zeros(256, dtype=bool)  # the bytes that can change nesting or string state
_SPECIAL[[_QUOTE, _BACKSLASH, ord("["), ord("{"), ord("]"), ord("}")]] = True
_STEP = np.zeros(256, dtype=np.int64)  # +1 opens a level, -1 closes one
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


def read_file(path: str | Path, *, field: str, limit: str) -> bytes:
    """Bytes of a regular file whose size is within ``LIMITS[limit]`` (checked before reading)."""
    p = Path(path)
    try:
        info = p.stat()
    except (OSError, ValueError):  # missing, unreadable, too long, an embedded NUL byte
        raise InvalidInputError(field, str(path), "an existing, readable file") from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidInputError(field, str(path), "a regular file (not a directory or device)")
    cap = int(LIMITS[limit].hi)
    check_size(limit, info.st_size, field=f"{field} size")
    try:
        with p.open("rb") as fh:
            data = fh.read(cap + 1)  # files that grow (or lie about their size) stay capped
    except OSError as err:
        raise InvalidInputError(field, str(path), f"a readable file ({err.strerror})") from None
    check_size(limit, len(data), field=f"{field} size")
    return data


def is_file(spec: str | Path) -> bool:
    """``Path(spec).is_file()`` that says False (never raises) for impossible paths."""
    try:
        return Path(spec).is_file()
    except (OSError, ValueError):
        return False


def max_depth(data: bytes, *, stop_above: int | None = None) -> int:
    """Deepest nesting of ``[``/``{`` outside strings (stops early past ``stop_above``).

    The scan runs in 1 MiB numpy chunks, carrying three facts across chunk borders: the depth,
    whether we are inside a string, and how many backslashes ended the previous chunk (a quote
    after an odd number of them is escaped). Only the six structural bytes are looked at. On a
    valid JSON prefix it agrees exactly with the parser, which stops at the first invalid byte.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    depth, deepest, in_string, run = 0, 0, False, 0
    for start in range(0, len(buf), _CHUNK):
        c = buf[start : start + _CHUNK]
        pos = np.flatnonzero(_SPECIAL[c])
        s = c[pos]
        if run == 0 and not (s == _BACKSLASH).any():
            real_quote = s == _QUOTE
        else:
            real_quote = (s == _QUOTE) & (_backslashes_before(c, run)[pos] % 2 == 0)
        # inside a string after an odd number of real quotes (counting the carried state)
        inside = (np.cumsum(real_quote) + int(in_string)) % 2 == 1
        step = np.where(inside, 0, _STEP[s])
        level = depth + np.cumsum(step)
        if len(level):
            deepest = max(deepest, int(level.max()))
            depth = int(level[-1])
            in_string = bool(inside[-1])
        if c[-1] == _BACKSLASH:
            run = int(_backslashes_before(np.append(c, np.uint8(0)), run)[-1])
        else:
            run = 0
        if stop_above is not None and deepest > stop_above:
            break
    return deepest


def _backslashes_before(c: np.ndarray, run: int) -> np.ndarray:
    """Number of consecutive backslashes right before each position (``run`` carried in)."""
    idx = np.arange(len(c))
    # index of the last non-backslash byte at or before each position (-1: none yet)
    last_plain = np.maximum.accumulate(np.where(c == _BACKSLASH, -1, idx))
    before = np.empty(len(c), dtype=np.int64)
    before[0] = run
    prev = last_plain[:-1]
    before[1:] = np.where(prev >= 0, idx[:-1] - prev, idx[1:] + run)
    return before


def _refuse_constant(name: str) -> float:
    raise InvalidInputError("JSON number", name, "a finite number (NaN/Infinity are not JSON)")


def loads(data: str | bytes, *, field: str, limit: str) -> Any:
    """Parse JSON text of at most ``LIMITS[limit]`` bytes, nested at most ``json_depth`` deep."""
    check_size(limit, len(data), field=f"{field} size")
    if isinstance(data, str):
        raw = data.encode("utf-8", errors="replace")  # brackets are ASCII: the scan is unaffected
        text = data
    else:
        raw = bytes(data)
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise InvalidInputError(
                f"{field} text", f"byte 0x{raw[err.start]:02x} at offset {err.start}", "UTF-8"
            ) from None
    deepest = int(LIMITS["json_depth"].hi)
    depth = max_depth(raw, stop_above=deepest)
    if depth > deepest:
        raise InvalidInputError(
            f"{field} nesting depth", depth, f"at most {deepest} levels of [ ] / {{ }}"
        )
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as err:
        raise InvalidInputError(
            f"{field} JSON", err.msg + f" at line {err.lineno} column {err.colno}", "valid JSON"
        ) from None
    except (ValueError, RecursionError) as err:  # e.g. an integer of more than 4300 digits
        if isinstance(err, InvalidInputError):
            raise InvalidInputError(f"{field}: {err.field}", err.value, err.expected) from None
        raise InvalidInputError(f"{field} JSON", str(err).split("\n")[0], "valid JSON") from None


def load_file(path: str | Path, *, field: str, limit: str) -> Any:
    """:func:`read_file` then :func:`loads`."""
    return loads(read_file(path, field=field, limit=limit), field=field, limit=limit)


def to_strict(value: Any, path: str = "") -> tuple[Any, dict[str, str]]:
    """A JSON-safe copy of ``value``: non-finite floats become None; also ``{path: reason}``.

    numpy scalars and arrays become plain Python numbers and lists.
    """
    reasons: dict[str, str] = {}

    def walk(v: Any, where: str) -> Any:
        if isinstance(v, np.ndarray):
            v = v.tolist()
        elif isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
            return v
        if isinstance(v, float):
            if math.isfinite(v):
                return v
            reasons[where or "."] = "NaN (undefined)" if v != v else f"{v} (not a JSON number)"
            return None
        if isinstance(v, dict):
            return {str(k): walk(x, f"{where}.{k}" if where else str(k)) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x, f"{where}[{i}]") for i, x in enumerate(v)]
        return str(v)

    return walk(value, path), reasons


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON text; a dict with non-finite numbers gains ``"null_reasons": {path: why}``."""
    clean, reasons = to_strict(value)
    if reasons and isinstance(clean, dict):
        clean = {**clean, "null_reasons": {**clean.get("null_reasons", {}), **reasons}}
    return json.dumps(clean, allow_nan=False, **kwargs)


def check_output_path(target: str, *, field: str = "--json") -> Path | None:
    """Refuse an output path that cannot be written, before any work (None for ``-``)."""
    if target == "-":
        return None
    path = Path(target)
    if path.is_dir():
        raise InvalidInputError(field, target, "a file path, not a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidInputError(field, target, f"a path in an existing folder ({parent} is none)")
    if path.exists() and not os.access(path, os.W_OK):
        raise InvalidInputError(field, target, "a writable file")
    if not path.exists() and not os.access(parent, os.W_OK):
        raise InvalidInputError(field, target, f"a path in a writable folder ({parent})")
    return path
