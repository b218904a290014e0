"""Fault harness: a replicated cluster under a seeded nemesis, with a checker for safety and
liveness. ``python -m tests.chaos --duration 600 --seed 7`` (docs/testing.md)."""
