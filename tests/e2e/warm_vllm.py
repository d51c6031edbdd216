"""A warm vLLM for the test suite's `kvcc confirm` calls.

Importing vLLM's scheduler costs about 20 s of CPU on the CI machine, and the confirm
tests made eleven `kvcc confirm` calls, each a fresh Python: more than three minutes of
the suite's CPU spent importing the same modules. `serve` imports them once and plays
each call in a child forked from that warm process; `client` stands in for the Python
that `kvcc confirm --python` runs. The child imports `kvcc_confirm` from the call's own
PYTHONPATH (the copy kvcc writes from its binary, as with a cold Python: nothing of it is
imported here), gets the caller's stdin, stdout, stderr, working directory and
environment, and its exit code is the caller's. So kvcc, its player and vLLM's code run as
they do in a cold process; only vLLM's import is shared.

    python warm_vllm.py serve DIR    # vLLM's venv Python: listens on DIR/vllm.sock,
                                     # prints "ready"; within a second of the test
                                     # process's end, removes DIR and ends
    python warm_vllm.py client DIR -m kvcc_confirm ARGS...
"""

import json
import os
import shutil
import socket
import struct
import sys
import threading


def serve(directory):
    # vLLM's logging set as kvcc_confirm's __main__ sets it before its import (vLLM logs
    # to stdout, which carries the player's JSON lines); stdout is the test's meanwhile.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    ready = sys.stdout
    sys.stdout = sys.stderr
    # The modules kvcc_confirm's player imports (confirm/kvcc_confirm/play.py and
    # connector.py). A module missing from this list is imported by each child instead:
    # slower, never different.
    import torch  # noqa: F401
    import vllm  # noqa: F401
    import vllm.config  # noqa: F401
    import vllm.distributed.kv_transfer.kv_connector.factory  # noqa: F401
    import vllm.distributed.kv_transfer.kv_connector.utils  # noqa: F401
    import vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector  # noqa: F401
    import vllm.v1.core.sched.scheduler  # noqa: F401
    import vllm.v1.structured_output  # noqa: F401

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(directory, "vllm.sock"))
    listener.listen(64)
    # Ends with the test process that started it (it is then someone else's child).
    parent = os.getppid()
    listener.settimeout(1.0)
    print("ready", file=ready, flush=True)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:
                shutil.rmtree(directory, ignore_errors=True)
                os._exit(0)
            continue
        conn.settimeout(None)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        while chunk := conn.recv(1 << 16):
            message += chunk
        call = json.loads(message)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            os._exit(play_call(call, fds))
        for fd in fds:
            os.close(fd)
        threading.Thread(target=report_exit, args=(conn, pid), daemon=True).start()


def play_call(call, fds):
    """In the forked child: become the caller's `python -m kvcc_confirm ARGS`."""
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    # Fresh streams on the caller's descriptors: the server's own may hold state (and
    # locks of threads the fork left behind).
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    os.chdir(call["cwd"])
    os.environ.clear()
    os.environ.update(call["env"])
    sys.path[:0] = [p for p in call["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.argv = ["kvcc_confirm"] + call["args"]
    code = 0
    try:
        runpy.run_module("kvcc_confirm", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as a cold Python would
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def report_exit(conn, pid):
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    conn.sendall(struct.pack("!i", code if code >= 0 else 128 - code))
    conn.close()


def client(directory, argv):
    if argv[:2] != ["-m", "kvcc_confirm"]:
        sys.exit(f"warm_vllm client: plays only `-m kvcc_confirm ...`, not {argv}")
    call = {"args": argv[2:], "cwd": os.getcwd(), "env": dict(os.environ)}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.path.join(directory, "vllm.sock"))
    socket.send_fds(conn, [json.dumps(call).encode()], [0, 1, 2])
    conn.shutdown(socket.SHUT_WR)
    reply = b""
    while len(reply) < 4:
        chunk = conn.recv(4 - len(reply))
        if not chunk:
            sys.exit("warm_vllm client: the server ended before the call did")
        reply += chunk
    sys.exit(struct.unpack("!i", reply)[0])


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["client"]:
        client(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
