"""Errors a user can hit. Each carries a message written for people; the CLI prints it as one line."""

from __future__ import annotations


class DetError(Exception):
    """Base class for every error det-airflow reports to a user (never a bug)."""


class ConfigError(DetError):
    """An experiment configuration is invalid.

    ``problems`` holds ``(field_path, message)`` pairs; ``str()`` joins them one per line as
    ``field.path: message`` (the file name first when known).
    """

    def __init__(self, problems: list[tuple[str, str]], *, source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        prefix = f"{self.source}: " if self.source else ""
        lines = [f"{prefix}{path}: {msg}" if path else f"{prefix}{msg}" for path, msg in self.problems]
        return "\n".join(lines)


class ContextError(DetError):
    """A context directory cannot be packed, or an archive cannot be safely extracted."""


class APIError(DetError):
    """The master answered with an error, or could not be reached."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class InvalidHP(Exception):  # noqa: N818 - Determined's public name
    """Raised by training code when its hyperparameters are invalid; the searcher replaces the trial."""
