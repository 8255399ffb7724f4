"""Fixtures of the master's unit tests."""

from tests.unit.master.creating import creator
from tests.unit.master.people_app import people, service_headers

__all__ = ["creator", "people", "service_headers"]
