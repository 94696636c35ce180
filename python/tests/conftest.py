"""Shared fixtures: child processes (Python peers, memwire's C++ programs, nats-server), each
stopped by its pid at the end of its test; every wait is bounded."""

import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.environ.get("MEMWIRE_BUILD_DIR", "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def program(relative):
    """A C++ program of the build tree (MEMWIRE_BUILD_DIR), or skip."""
    path = os.path.join(BUILD_DIR, relative)
    if not BUILD_DIR or not os.access(path, os.X_OK):
        pytest.skip(f"{relative} not built (MEMWIRE_BUILD_DIR={BUILD_DIR!r})")
    return path


class Child:
    """A child process with line I/O; reads are bounded by a deadline."""

    def __init__(self, argv, env=None, stdin=True):
        self.argv = argv
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self._buffer = b""

    @property
    def pid(self):
        return self.process.pid

    def send(self, line):
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def read_line(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise AssertionError(f"{self.argv[:3]}: no line within {timeout} s; stderr: {self.stderr_tail()}")
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise AssertionError(f"{self.argv[:3]} exited ({self.process.wait(10)}): {self.stderr_tail()}")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def stderr_tail(self):
        if self.process.poll() is None:
            return "(running)"
        return self.process.stderr.read().decode(errors="replace")[-2000:]

    def wait(self, timeout=30.0):
        return self.process.wait(timeout)

    def kill(self):
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self):
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream:
                stream.close()


def python_env():
    env = dict(os.environ)
    import memwire

    package_parent = os.path.dirname(os.path.dirname(memwire.__file__))
    env["PYTHONPATH"] = package_parent + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def children():
    """Starts children; kills whatever is still running at the end of the test."""
    started = []

    def start(argv, env=None, stdin=True):
        child = Child(argv, env=env if env is not None else python_env(), stdin=stdin)
        started.append(child)
        return child

    yield start
    for child in started:
        child.stop()


@pytest.fixture
def peer(children):
    """peer(role, kind, size, seed, descs=1) -> a Python peer process (tests/peer.py)."""

    def start(role, kind, size, seed, descs=1):
        return children([sys.executable, os.path.join(HERE, "peer.py"), role, kind, str(size), str(seed), str(descs)])

    return start


@pytest.fixture(scope="session")
def nats_url():
    """A private nats-server with JetStream on a free loopback port, for the whole session."""
    binary = shutil.which("nats-server") or next(
        (p for p in ("/usr/sbin/nats-server", "/usr/bin/nats-server") if os.access(p, os.X_OK)), None
    )
    if binary is None:
        pytest.skip("nats-server not installed (Debian package nats-server)")
    workdir = tempfile.mkdtemp(prefix="memwire-pytest-nats-")
    port = free_port()
    config = os.path.join(workdir, "nats.conf")
    with open(config, "w") as f:
        f.write(f'listen: "127.0.0.1:{port}"\nserver_name: "memwire_pytest_{port}"\n')
        f.write(f'jetstream {{ store_dir: "{os.path.join(workdir, "store")}" }}\n')
    server = subprocess.Popen([binary, "-c", config], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        log = b""
        with selectors.DefaultSelector() as selector:
            selector.register(server.stderr.fileno(), selectors.EVENT_READ)
            while b"Server is ready" not in log:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise RuntimeError(f"nats-server not ready: {log.decode(errors='replace')}")
                chunk = os.read(server.stderr.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(f"nats-server exited: {log.decode(errors='replace')}")
                log += chunk
        # Keep draining its log so that it never blocks on a full pipe (nor dies of SIGPIPE).
        threading.Thread(target=lambda: server.stderr.read(), daemon=True).start()
        yield f"nats://127.0.0.1:{port}"
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGTERM)
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(server.pid, signal.SIGKILL)
                server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def http_endpoint():
    """An HTTP metadata endpoint embedded in this process, on a free port."""
    import memwire

    endpoint = memwire.HttpEndpoint()
    yield endpoint
    endpoint.stop()
