"""The one error type for bad user input (configs, traces, shapes, flags).

Every message names where the problem is (file, line or field) and what was expected, so that
the CLI can print it as one line and exit non-zero without a traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from the user: `where` names the file/line/field, `expected` the accepted form."""

    def __init__(self, where: str, problem: str, expected: str | None = None) -> None:
        self.where = where
        self.problem = problem
        self.expected = expected
        text = f"{where}: {problem}"
        if expected:
            text += f" (expected {expected})"
        super().__init__(text)

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str, str | None]]:
        # Rebuilt from its parts when it crosses processes (a worker of the simulation pool).
        return (type(self), (self.where, self.problem, self.expected))
