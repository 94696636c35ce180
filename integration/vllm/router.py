"""A prefill engine, a decode engine (each its own process, engine.serve) and a router between
them that does what vLLM's disagg proxy does: the prompt to the prefill with
do_remote_decode, its kv_transfer_params unchanged to the decode."""

import itertools
import multiprocessing
import os
import signal
import socket
import threading
import time
from concurrent.futures import Future

import engine

_ids = itertools.count(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EngineProcess:
    def __init__(self, role, extra, **options):
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process = context.Process(target=engine.serve, args=(child, role, extra, options), daemon=True)
        self.process.start()
        child.close()  # the child's end lives in the child alone: its death reads as EOF here
        self._lock = threading.Lock()
        self._waiting = {}  # request id -> Future
        self._replies = []
        self._reply_ready = threading.Condition(self._lock)
        try:
            kind, _ = self._conn.recv()  # vLLM's imports and planning take a while
        except EOFError:
            self.process.join(10)
            raise RuntimeError(f"the {role} engine did not start (exit {self.process.exitcode})") from None
        assert kind == "ready", kind
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while True:
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                with self._lock:
                    for future in self._waiting.values():
                        if not future.done():
                            future.set_exception(RuntimeError("the engine process ended"))
                    self._reply_ready.notify_all()
                return
            with self._lock:
                if kind == "finished":
                    request_id, result, at = payload
                    result["finished_at"] = at
                    future = self._waiting.pop(request_id, None)
                    if future is not None:
                        future.set_result(result)
                else:
                    self._replies.append((kind, payload))
                    self._reply_ready.notify_all()

    def submit(self, request_id, prompt, params, max_tokens):
        future = Future()
        with self._lock:
            self._waiting[request_id] = future
            self._conn.send(("add", request_id, prompt, params, max_tokens))
        return future

    def abort(self, request_id):
        with self._lock:
            self._conn.send(("abort", request_id))

    def ask(self, command, timeout=30):
        with self._lock:
            self._conn.send((command,))
            deadline = time.monotonic() + timeout
            while not any(kind == command for kind, _ in self._replies):
                left = deadline - time.monotonic()
                if left <= 0 or not self.process.is_alive():
                    raise TimeoutError(f"no answer to {command}")
                self._reply_ready.wait(left)
            index = next(i for i, (kind, _) in enumerate(self._replies) if kind == command)
            return self._replies.pop(index)[1]

    def free_blocks(self):
        return self.ask("free_blocks")

    def cpu_seconds(self):
        """The process's CPU time so far, user and system, all of its threads."""
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill(self):
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(10)

    def stop(self):
        if self.process.is_alive():
            try:
                with self._lock:
                    self._conn.send(("stop",))
            except OSError:
                pass
            self.process.join(30)
            if self.process.is_alive():
                self.process.kill()


class Router:
    def __init__(self, prefill, decode, decode_sideband=None):
        self.prefill, self.decode = prefill, decode
        self.decode_sideband = decode_sideband  # push mode: where the decode publishes grants

    def prefill_only(self, prompt, timeout=120):
        request_id = f"req-{next(_ids)}"
        result = self.prefill.submit(request_id, prompt, {"do_remote_decode": True}, 1).result(timeout)
        return request_id, result

    def generate(self, prompt, max_tokens=4, timeout=120, before_decode=None):
        """The prompt through prefill then decode; decode's result with the timings."""
        started = time.monotonic()
        request_id, prefilled = self.prefill_only(prompt, timeout)
        params = prefilled["kv_transfer_params"]
        assert params and params.get("do_remote_prefill"), prefilled
        if before_decode is not None:
            before_decode(request_id, params)
        added = time.monotonic()
        # Decode's request id is its own; the prefill's travels in the params.
        decoded = self.decode.submit(f"{request_id}-d", prompt, dict(params), max_tokens).result(timeout)
        kv_in = decoded.get("first_forward_at")
        decoded.update(request_id=request_id, params=params, prefill=prefilled,
                       add_to_finish=decoded["finished_at"] - added, total=time.monotonic() - started,
                       add_to_kv_in=None if kv_in is None else kv_in - added,
                       start_to_kv_in=None if kv_in is None else kv_in - started)
        return decoded

    def generate_pushed(self, prompt, max_tokens=4, timeout=120, prefill=True):
        """Push mode: the request to both engines at once; the prefill streams each layer into
        the decode's granted blocks as it computes it. ``prefill=False``: the prefill never
        gets it (a prefill lost before it began)."""
        request_id = f"req-{next(_ids)}"
        added = time.monotonic()
        decoding = self.decode.submit(f"{request_id}-d", prompt,
                                      {"do_remote_prefill": True, "memwire_push": request_id}, max_tokens)
        prefilled = None
        if prefill:
            prefilled = self.prefill.submit(request_id, prompt, {
                "do_remote_decode": True, "memwire_push": request_id,
                "memwire_push_to": self.decode_sideband}, 1).result(timeout)
        decoded = decoding.result(timeout)
        kv_in = decoded.get("first_forward_at")
        decoded.update(request_id=request_id, prefill=prefilled, add_to_finish=decoded["finished_at"] - added,
                       add_to_kv_in=None if kv_in is None else kv_in - added,
                       start_to_kv_in=None if kv_in is None else kv_in - added)
        return decoded
