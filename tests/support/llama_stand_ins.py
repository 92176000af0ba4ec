"""Stand-in ``llama-server`` executables for the tests of choosing and starting the model server.

A stand-in is a small Python script: it appends its name and arguments to a ``calls`` file,
prints :data:`FAKE_HELP` for ``--help``, dies with SIGILL at start when asked to (as a server
built for instructions the CPU lacks does), and otherwise answers ``GET /v1/models`` with our
model on ``--port``.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

FAKE_HELP = """usage: llama-server [options]
  -m,    --model FNAME        model path
  --host HOST                 ip address to listen
  --port PORT                 port to listen
  --jinja                     use jinja template
  --chat-template-file JINJA  template file
  -a,    --alias STRING       alias
  -c,    --ctx-size N         context size
  -t,    --threads N          threads
  -tb,   --threads-batch N    threads for batches
  -np,   --parallel N         slots
  --temp N                    temperature
  --reasoning-format FORMAT   thinking
"""

SERVER = """#!{python}
import http.server, json, os, signal, sys
args = sys.argv[1:]
with open({calls!r}, "a") as fh:
    fh.write({name!r} + " " + " ".join(args) + "\\n")
if "--help" in args:
    print({help!r})
    sys.exit(0)
if {crash}:
    print("AMX is not ready to be used!", flush=True)
    os.kill(os.getpid(), signal.SIGILL)
port = int(args[args.index("--port") + 1])

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"data": [{{"id": "qwen2.5-coder-1.5b-instruct"}}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def stand_in_server(path: Path, calls: Path, *, crash: bool) -> Path:
    path.write_text(
        SERVER.format(
            python=sys.executable, calls=str(calls), name=path.name, help=FAKE_HELP, crash=crash
        )
    )
    path.chmod(0o755)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
