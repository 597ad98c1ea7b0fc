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
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field} must be {expected}; got {shown}")


class InfeasibleError(TapsError):
    """No plan in the strategy space satisfies the constraints (memory, divisibility)."""


def check_positive(field: str, value: object, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float after checking it is a finite positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(field, value, "a number")
    number = float(value)
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
