"""What every fuzz target shares: how a broken property is reported, and inputs made from the fuzzer's bytes.

A target is a module ``fuzz_<name>.py`` in this folder whose docstring states its property and whose
``test_one_input(data: bytes)`` checks it for one input: it returns when the property holds and raises when
it does not (``PropertyBroken``, or whatever escaped the code under test). ``runner.py`` runs the targets
under atheris (coverage-guided: every ``memsync`` module a target imports is instrumented) or replays one
input without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class PropertyBroken(AssertionError):
    """The code under test answered, but not what its contract says."""


def holds(condition: bool, what: str) -> None:
    """Raise ``PropertyBroken(what)`` unless ``condition``; ``what`` names the property and the value."""
    if not condition:
        raise PropertyBroken(what)


class Provider(Protocol):
    """The part of ``atheris.FuzzedDataProvider`` the targets use (typed here: atheris ships no stubs)."""

    def ConsumeBytes(self, count: int) -> bytes: ...
    def ConsumeUnicode(self, count: int) -> str: ...
    def ConsumeUnicodeNoSurrogates(self, count: int) -> str: ...
    def ConsumeIntInRange(self, low: int, high: int) -> int: ...
    def ConsumeInt(self, count: int) -> int: ...
    def ConsumeBool(self) -> bool: ...
    def ConsumeFloat(self) -> float: ...
    def ConsumeProbability(self) -> float: ...
    def remaining_bytes(self) -> int: ...


def provider(data: bytes) -> Provider:
    """A ``FuzzedDataProvider`` over ``data`` (atheris' own: the same input always gives the same values)."""
    import atheris

    fdp: Provider = atheris.FuzzedDataProvider(data)
    return fdp


def pick(fdp: Provider, choices: Sequence[T]) -> T:
    return choices[fdp.ConsumeIntInRange(0, len(choices) - 1)]


def one_of(data: bytes, *checks: Callable[[Provider], None]) -> None:
    """Run the check of a target that the input's first byte picks, on the rest of the input."""
    fdp = provider(data)
    pick(fdp, checks)(fdp)


#: Pieces of memory paths that sit on the rules' edges: separators, dot segments, NUL, a backslash, a lone
#: surrogate, a character that NFC composes, a format character, a line separator, memsync's own names, and
#: long and wide runs. A path built from them reaches every rule in a few mutations.
PATH_PIECES: tuple[str, ...] = (
    "/",
    "//",
    ".",
    "..",
    "a",
    "notes",
    "b.md",
    "\x00",
    "\\",
    "\n",
    "\x7f",
    "\ud800",
    "\udcff",
    "e\u0301",
    "é",
    "\u200b",
    "\u2028",
    "\U0001f600",
    " ",
    ".anthropic-memory-store",
    ".fs-0123456789abcdef.tmp",
    "x" * 255,
    "é" * 130,
    "/s" * 20,
)


def path_text(fdp: Provider, pieces: int = 12) -> str:
    """A string built from ``PATH_PIECES`` and arbitrary characters, chosen by the input."""
    parts = []
    for _ in range(fdp.ConsumeIntInRange(0, pieces)):
        if fdp.ConsumeBool():
            parts.append(pick(fdp, PATH_PIECES))
        else:
            parts.append(fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 8)))
    return "".join(parts)
