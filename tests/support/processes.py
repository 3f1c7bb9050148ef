"""Child processes a test left behind."""

from __future__ import annotations

import os

import psutil


def children_running(*markers: str) -> list[psutil.Process]:
    """This process's descendants whose command line contains one of `markers`, or runs `nodes`."""
    found = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if any(m in cmdline for m in markers) or "nodes" in cmdline.split():
            found.append(child)
    return found
