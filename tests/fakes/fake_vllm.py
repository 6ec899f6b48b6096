"""A stand-in for vLLM's server: `fake_vllm.py --model DIR --port N --served-model-name NAME ...`.

The real server (tests/vllm/) cannot be made to hang at start or to leave a worker that ignores
SIGTERM; tests of those paths of `tbx.vllm.server` run this instead. After a short start-up delay
(the port is closed meanwhile, as with a loading vLLM) it serves the same HTTP API from
`tests/fakes/openai_server.py`, answering every chat request with a fixed text, and the routes that
change and name the weights (`/weight_info`, `/update_weight_version`, `/pause`, `/resume`,
`/reset_prefix_cache`, `/collective_rpc`, `/version`); each reload prints `fake vllm: reload_weights
PATH` to its log. Unknown flags are accepted and ignored. Behaviour the tests need is switched by
environment variables:

- FAKE_VLLM_STARTUP_S: seconds before the port opens (default 0.3);
- FAKE_VLLM_EXIT_CODE: print an error and exit at once with this code (a failed start);
- FAKE_VLLM_IGNORE_SIGTERM=1: ignore SIGTERM, so only SIGKILL stops it;
- FAKE_VLLM_CHILD_PIDFILE: start a sleeping child process that ignores SIGTERM (a worker that
  outlives the main process) and write its pid to this file.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.openai_server import FakeOpenAIServer, text_reply

WEIGHT_ROUTES = ("/pause", "/resume", "/reset_prefix_cache", "/update_weight_version", "/collective_rpc")


class FakeVLLM(FakeOpenAIServer):
    """The chat server plus the weight routes of a vLLM started with VLLM_SERVER_DEV_MODE=1."""

    weight_version = "default"

    def _handler_class(self) -> type:
        server, chat = self, super()._handler_class()

        class Handler(chat):
            def do_GET(self) -> None:  # stdlib name
                if self.path == "/weight_info":
                    self._send(200, json.dumps({"weight_version": server.weight_version}).encode())
                elif self.path == "/version":
                    self._send(200, b'{"version": "fake"}')
                else:
                    super().do_GET()

            def do_POST(self) -> None:  # stdlib name
                path = self.path.partition("?")[0]
                if path not in WEIGHT_ROUTES:
                    super().do_POST()
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                if path == "/update_weight_version":
                    server.weight_version = body["new_version"]
                elif path == "/collective_rpc":
                    print(f"fake vllm: reload_weights {body['kwargs']['weights_path']}", flush=True)
                self._send(200, b'{"success": true}')

        return Handler


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fake_vllm")
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    args, unknown = parser.parse_known_args(argv)
    print(f"fake vllm: serve {args.model} on {args.host}:{args.port}; ignored flags {unknown}", flush=True)

    exit_code = os.environ.get("FAKE_VLLM_EXIT_CODE")
    if exit_code:
        print(f"ValueError: fake vllm cannot load model {args.model}", flush=True)
        return int(exit_code)
    if os.environ.get("FAKE_VLLM_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pidfile = os.environ.get("FAKE_VLLM_CHILD_PIDFILE")
    if pidfile:
        worker = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
        child = subprocess.Popen([sys.executable, "-c", worker])
        Path(pidfile).write_text(str(child.pid))

    time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP_S", "0.3")))
    server = FakeVLLM(models=[args.served_model_name or args.model],
                              default=text_reply("hello from fake vllm"), host=args.host, port=args.port)
    print("fake vllm: ready", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
