"""Runs the documentation's snippets in processes forked from one that imported their modules.

Each snippet is a program of its own: ``python snippet.py``, or a ``ctxemb ...`` command of a
console session. Started fresh, each paid for the imports of its page (Chroma ~1.5 CPU-s,
Haystack ~2.7, LlamaIndex ~2) before doing anything: the most of the documentation tests' CPU.
Here a server, started once per page environment with that environment's Python, imports the
modules its page's snippets import (:func:`preloads`) and then forks one process per snippet.
That process is still the snippet's own: it runs in the page's environment, in the snippet's
folder, with the caller's environment variables, stdin, stdout and stderr (passed over a unix
socket), as ``__main__``, and its exit status is the caller's. What it does not repeat is the
import.

Two roles, one file (it needs the standard library only, so it runs in every environment):

``python FOLDER/warm.py serve SOCKET MODULE...`` (FOLDER: one holding nothing else)
    imports the modules it can, listens on SOCKET, prints ``ready N`` (N: the process's threads
    after the imports) and forks, per connection, a supervisor that forks the snippet's process
    and reports its exit status back.
``python -S warm.py call SOCKET python SCRIPT`` / ``... call SOCKET ctxemb ENTRY ARGS...``
    the caller: hands its argv, folder, environment and standard streams to the server, passes
    on SIGINT, SIGTERM and SIGHUP to the snippet's process, and exits as it exited.

Only modules that start no thread of their own when imported are safe to fork after; the
server reports its threads (``ready N``) and the test session checks N (numpy's BLAS keeps one
thread, which it re-creates in a forked child).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys

#: What the snippets' imports leave for later, each imported on first use by the module named:
#: imported up front too. (Not onnxruntime nor torch: each starts a thread when imported.)
LATER = {
    "ctxemb_core": ["ctxemb_core.cli", "ctxemb_core.cli.app", "tokenizers"],
    "ctxemb_chroma": ["chromadb", "ctxemb_chroma._driver", "ctxemb_chroma._store"],
    "ctxemb_pgvector": ["psycopg", "ctxemb_pgvector._driver", "ctxemb_pgvector._store"],
    "ctxemb_qdrant": ["qdrant_client"],
    "ctxemb_haystack": ["haystack"],
    "ctxemb_llamaindex": ["llama_index.core"],
    "ctxemb_langchain": ["langchain_core.vectorstores"],
}
#: What a ``ctxemb`` command imports: the CLI, and Chroma, its default store.
COMMAND = ["ctxemb_core", "ctxemb_chroma"]
_NEVER = {"onnxruntime", "torch", "sentence_transformers", "transformers", "ray"}


def preloads(python_snippets: list[str], console: bool) -> list[str]:
    """The modules to import up front for these snippets (those of a console session: a
    ``ctxemb`` command's), in the order they first appear."""
    import ast

    found: list[str] = []
    for text in python_snippets:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append(node.module)
    if console:
        found += COMMAND
    out: list[str] = []
    for name in found:
        for module in [name, *LATER.get(name.split(".")[0], [])]:
            if module not in out and module.split(".")[0] not in _NEVER:
                out.append(module)
    return out


# -- the wire: one length-prefixed JSON message with the caller's three standard streams --------


def _send(conn: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(conn, [struct.pack("!I", len(data))], [0, 1, 2])
    conn.sendall(data)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, 4, 3)
    (size,) = struct.unpack("!I", head)
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the caller went away")
        data += chunk
    return json.loads(data), fds


# -- the server ---------------------------------------------------------------------------------


def serve(path: str, modules: list[str]) -> dict:
    """Imports ``modules``, then serves; returns only in a snippet's process, with its message."""
    import importlib

    for module in modules:
        # One not installed in this environment: the snippet says so itself, as it would have.
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    # SIGTERM: wait for the supervisors, whose CPU time (and their snippets') thus counts in
    # this process's children's, as the processes started fresh counted in the test's.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(_reap(block=True)))
    print("ready", len(os.listdir("/proc/self/task")), flush=True)
    sys.stderr.flush()
    while True:
        conn, _ = listener.accept()
        _reap(block=False)
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            return _supervise(conn)
        conn.close()


def _reap(block: bool) -> int:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, 0 if block else os.WNOHANG)[0]:
            pass
    return 0


def _supervise(conn: socket.socket) -> dict:
    message, fds = _receive(conn)
    pid = os.fork()
    if pid == 0:  # the snippet's process
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(message["env"])
        return message
    for fd in fds:
        os.close(fd)
    conn.sendall(f"pid {pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


def run(message: dict) -> None:
    """Runs the snippet as Python would have: exceptions and exit codes take Python's own path."""
    import runpy
    import warnings

    argv = message["argv"]
    sys.argv = list(argv)
    # Where `python SCRIPT` puts the script's folder (the server's was this file's own, which
    # holds nothing else).
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    if message["kind"] == "python":
        # As `python -W ignore::DeprecationWarning snippet.py`, the tests' command, would.
        sys.warnoptions.append("ignore::DeprecationWarning")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        runpy.run_path(argv[0], run_name="__main__")
    else:
        from ctxemb_core.cli import main

        sys.exit(main())


# -- the caller ---------------------------------------------------------------------------------


def call(path: str, kind: str, argv: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    _send(conn, {"kind": kind, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)})
    pid = 0

    def forward(signum: int, frame: object) -> None:
        if pid:
            os.kill(pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    lines = conn.makefile("r")
    for line in lines:
        word, value = line.split()
        if word == "pid":
            pid = int(value)
        elif word == "exit":
            code = int(value)
            return 128 - code if code < 0 else code
    raise ConnectionError("the snippet's supervisor went away without its exit status")


if __name__ == "__main__":
    role, where = sys.argv[1], sys.argv[2]
    if role == "serve":
        run(serve(where, sys.argv[3:]))
    else:
        sys.exit(call(where, sys.argv[3], sys.argv[4:]))
