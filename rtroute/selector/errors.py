"""The one exception a selector raises when it cannot be compiled."""
from __future__ import annotations


class SelectorError(ValueError):
    """A selector that is malformed, too large or too deeply nested.

    Attributes:
        position: 0-based offset in the selector text where the fault was found.
        reason: what went wrong, naming what was expected (without the position).
        text: the selector text, when known.
    """

    def __init__(self, reason: str, position: int, text: str | None = None) -> None:
        self.reason = reason
        self.position = position
        self.text = text
        super().__init__(f"{reason} (at position {position})")

    def pointer(self) -> str:
        """The selector with a caret under the faulty position, for error output."""
        if self.text is None:
            return ""
        line = self.text.replace("\n", " ").replace("\r", " ").replace("\t", " ")
        return f"{line}\n{' ' * self.position}^"


class EvaluationError(Exception):
    """Raised inside an evaluation that Artemis aborts (e.g. arithmetic on a string).

    Artemis catches the exception and the message does not match; `Selector.matches`
    does the same, and `Selector.evaluate` reports such an evaluation as unknown (None).
    """
