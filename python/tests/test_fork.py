"""fork(): a child forked after memwire objects exist (os.fork, multiprocessing's fork start
method) gets a clear error from an inherited connector, makes and uses connectors of its own,
and exits without hanging on the parent's threads. Each scenario runs in a child interpreter."""

import subprocess
import sys
import textwrap

from conftest import python_env

SCENARIO = textwrap.dedent(
    """
    import asyncio, faulthandler, gc, os, sys, time
    import memwire
    faulthandler.enable()

    async def read_between(owner, reader):
        source = bytearray(b"z" * 65536)
        readable = owner.create_readable(memwire.Descriptor(source))
        target = bytearray(65536)
        read = reader.begin_read(readable.metadata(), memwire.Descriptor(target))
        await read.wait_for_completion(timeout=10)
        return target == source

    endpoint = memwire.HttpEndpoint()
    connector, peer = memwire.Connector(), memwire.Connector()
    worker = memwire.Worker(connector, memwire.HttpChannel(endpoint.url))

    async def parent_setup():
        assert await read_between(connector, peer)
        return await worker.publish("before.fork", memwire.Descriptor(bytearray(64)))
    lease = asyncio.run(parent_setup())

    def child():
        try:
            connector.create_readable(memwire.Descriptor(bytearray(8)))
            return 10
        except memwire.InvalidArgumentError as error:
            if "fork()" not in str(error):
                return 11
        owner, reader = memwire.Connector(), memwire.Connector()
        if not asyncio.run(read_between(owner, reader)):
            return 12
        return 0
    """
)


def run(body, timeout=90):
    code = SCENARIO + textwrap.dedent(body)
    result = subprocess.run(
        [sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
        f"exit {result.returncode}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-4000:]}"
    )


def test_an_os_fork_child_errors_clearly_works_anew_and_exits():
    # The child ends through normal interpreter finalization, which drops every inherited
    # object (connector, worker, channel, lease, endpoint): that must not hang.
    run(
        """
        pid = os.fork()
        if pid == 0:
            status = child()
            if status:
                os._exit(status)
            sys.exit(0)
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise SystemExit("the child hung")
            time.sleep(0.02)
        assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
        assert asyncio.run(read_between(connector, peer))  # the parent's are untouched
        lease.close()
        print("ok")
        """
    )


def test_a_multiprocessing_fork_child_errors_clearly_and_works_anew():
    run(
        """
        import multiprocessing
        def target():
            sys.exit(child())
        process = multiprocessing.get_context("fork").Process(target=target)
        process.start()
        process.join(30)
        if process.exitcode is None:
            process.kill()
            raise SystemExit("the child hung")
        assert process.exitcode == 0, process.exitcode
        lease.close()
        print("ok")
        """
    )
