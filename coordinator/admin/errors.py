"""The one error type of the admin HTTP API: an HTTP status, Kafka's error name, and a message for people."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
