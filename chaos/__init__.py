"""Faults, seeded schedules, suites and the checker pipeline; built on the harness."""
