"""The exceptions taps_core raises: one small hierarchy, each message one line."""

from __future__ import annotations


class TapsError(Exception):
    """Base of every error taps_core raises on purpose."""


class InvalidInputError(TapsError, ValueError):
    """A user-supplied value is wrong; the message names the field, the value and the fix."""

    def __init__(self, field: str, value: object, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        where = " ".join(str(field).split())
        if len(where) > 160:
            where = where[:157] + "..."
        super().__init__(f"{where} must be {expected}; got {shown_value(value)}")

    def __reduce__(self) -> tuple[type, tuple[str, object, str]]:
        # picklable with its own arguments (raised in a worker process, re-raised here)
        return type(self), (self.field, self.value, self.expected)


def shown_value(value: object, width: int = 80) -> str:
    """A one-line, bounded ``repr`` of a user value (huge integers are summarised, not printed)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 16:
        return f"a {type(value).__name__} of {len(value)} items"
    try:
        shown = repr(value)
    except (ValueError, RecursionError):  # e.g. deeply nested lists
        shown = f"a {type(value).__name__}"
    shown = " ".join(shown.split())  # one line, whatever the value holds
    return shown if len(shown) <= width else shown[: width - 3] + "..."


class InfeasibleError(TapsError):
    """No plan in the strategy space satisfies the constraints (memory, divisibility)."""


def check_positive(field: str, value: object, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float after checking it is a finite positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(field, value, "a number")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidInputError(field, value, "a finite number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise InvalidInputError(field, value, "a finite number")
    if number < 0 or (number == 0 and not allow_zero):
        raise InvalidInputError(field, value, ">= 0" if allow_zero else "> 0")
    return number


def check_positive_int(field: str, value: object) -> int:
    """Return ``value`` after checking it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(field, value, "an integer >= 1")
    if value < 1:
        raise InvalidInputError(field, value, "an integer >= 1")
    return value
