"""Subcommands of the `ember` CLI, one module per top-level command (see ember.cli)."""
