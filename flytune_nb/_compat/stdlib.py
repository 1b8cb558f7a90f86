"""CPython internals flytune_nb reads, each with a fallback."""
from __future__ import annotations

import os


def caller_module(depth: int = 1) -> str | None:
    """The ``__name__`` of the module whose code called the function that calls this (``depth`` 2: that caller's
    caller, and so on), read from the calling frame's globals (``sys._getframe``). None where this Python has no
    ``sys._getframe`` (CPython-specific) or the stack is not that deep."""
    import sys

    getframe = getattr(sys, "_getframe", None)
    if getframe is None:
        return None
    try:
        return getframe(depth + 1).f_globals.get("__name__")  # frame 0 is this function, 1 the one calling it
    except ValueError:
        return None


def environ_bytes() -> dict | None:
    """The bytes-keyed dict behind ``os.environ`` on POSIX, or None. ``os.environ.get`` encodes the name on every call
    (~0.5 us a key); the serving path reads ~11 variables per call, so it reads this dict (~0.05 us a key)."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) and os.name == "posix" else None


def pool_broken(pool) -> bool:
    """Whether a ``ProcessPoolExecutor`` is broken (a worker died): ``submit`` would raise BrokenProcessPool. Reads
    the executor's ``_broken`` flag; a Python without it answers False and the submit's exception says so instead."""
    return bool(getattr(pool, "_broken", False))


def pool_processes(pool) -> list:
    """The worker processes of a ``ProcessPoolExecutor`` (its ``_processes`` dict), to kill them without waiting for
    their tasks; [] where the executor keeps no such dict (nothing to kill: ``shutdown`` still ends the pool)."""
    return list((getattr(pool, "_processes", None) or {}).values())


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def set_parent_death_signal(signum: int | None = None) -> bool:
    """Ask Linux to send this process ``signum`` (default SIGKILL) when its parent exits: prctl(PR_SET_PDEATHSIG)
    through libc. False where that does not exist (not Linux, no libc)."""
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum or signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def raise_in_thread(thread_id: int, exc_type: type) -> bool:
    """Raise ``exc_type`` in another thread at its next bytecode (CPython's PyThreadState_SetAsyncExc): stops a
    runaway pure-Python loop; a thread blocked in C (time.sleep) sees it only when the call returns. False where the
    call does not exist or found no such thread."""
    try:
        import ctypes

        n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))
    except (AttributeError, OSError):
        return False
    if n > 1:  # more than one thread state changed: undo (the documented contract)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)
        return False
    return n == 1


def drop_forkserver_alive_fd() -> bool:
    """In a child forked by multiprocessing's forkserver: close this process's copy of the write end of the server's
    "alive" pipe. Python hands it to every child (so that the child could start processes through the same server;
    ``forkserver._forkserver._forkserver_alive_fd``, CPython 3.4-3.13), and the server exits only when every copy is
    closed: a hung child holding one keeps the server alive after its caller died, and with it the child's own
    parent-death signal, which waits for the server. False where there is no such descriptor."""
    try:
        from multiprocessing import forkserver
    except ImportError:
        return False
    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if not isinstance(fd, int):
        return False
    try:
        os.close(fd)
    except OSError:
        return False
    server._forkserver_alive_fd = None
    return True


def multiprocessing_temp_dir() -> str | None:
    """The temp folder multiprocessing made for this process (``pymp-*``: the forkserver's listening socket lives in
    it on CPython <= 3.11), which only its exit handler removes; ``current_process()._config['tempdir']``, CPython
    3.4-3.13. None where none was made or this Python keeps it elsewhere."""
    import sys

    if "multiprocessing" not in sys.modules:  # never imported: it made nothing
        return None
    from multiprocessing import process

    config = getattr(process.current_process(), "_config", None)
    tempdir = config.get("tempdir") if isinstance(config, dict) else None
    return tempdir if isinstance(tempdir, str) else None
