"""Disk fault scenarios on real file systems (issue 23): see scenario.py."""
