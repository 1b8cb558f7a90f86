"""Misbehaving configs for the fault-isolation tests. No Triton: the plugin contract only needs a callable.
MODE 0 works (after sleeping SLEEP_MS), 1 raises, 2 calls os.abort(), 3 hangs, 4 segfaults, 5 hangs holding the GIL
(libc sleep called through ctypes.PyDLL, which keeps the GIL: no Python thread of the process runs meanwhile), 6
prints 4 MiB to stdout and works."""
import ctypes
import os
import time


def launch(x, out, config):
    if os.environ.get("FLYTUNE_EVIL_POOL_MARK") == "fail":  # lets a test see which environment a process got
        raise RuntimeError("FLYTUNE_EVIL_POOL_MARK is set in this process")
    mode = config["MODE"]
    if mode == 1:
        raise RuntimeError("illegal config: simulated launch failure")
    if mode == 2:
        os.abort()
    if mode == 3:
        time.sleep(3600)
    if mode == 4:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if mode == 5:
        ctypes.PyDLL(None).sleep(3600)
    if mode == 6:
        print("flood " * ((4 << 20) // 6), flush=True)
    time.sleep(config.get("SLEEP_MS", 0) / 1000)
    out.copy_(x * 2)
    return out
