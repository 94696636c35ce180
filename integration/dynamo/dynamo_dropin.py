"""pytest plugin: runs NVIDIA Dynamo's own tests on memwire's drop-in.

    MEMWIRE_DYNAMO_SYSTEM=memwire       dynamo.nixl_connect is memwire (the only change: the import)
    MEMWIRE_DYNAMO_SYSTEM=nixl_connect  Dynamo's own nixl_connect, unchanged

MEMWIRE_DYNAMO_MAX_ITEMS lowers NixlReadEmbeddingReceiver's pre-registered buffers (1,024 x 8 MiB
by default: 8 GiB) to fit a CI machine's memory; said in the run's output.
"""

import os
import sys

import pytest


def pytest_configure(config):
    system = os.environ.get("MEMWIRE_DYNAMO_SYSTEM", "memwire")
    if system == "memwire":
        import dynamo
        import memwire

        sys.modules["dynamo.nixl_connect"] = memwire
        dynamo.nixl_connect = memwire
        _count_connectors_made_by_dynamo(memwire)
    elif system != "nixl_connect":
        raise pytest.UsageError(f"MEMWIRE_DYNAMO_SYSTEM is memwire or nixl_connect, not {system!r}")
    max_items = os.environ.get("MEMWIRE_DYNAMO_MAX_ITEMS")
    if max_items:
        from dynamo.common.multimodal import embedding_transfer

        init = embedding_transfer.NixlReadEmbeddingReceiver.__init__
        hidden, tokens, items = init.__defaults__
        init.__defaults__ = (hidden, tokens, int(max_items))
        print(f"dynamo_dropin: NixlReadEmbeddingReceiver max_items {items} -> {max_items} "
              f"({int(max_items) * hidden * tokens >> 20} MiB pre-registered)", file=sys.stderr)
    print(f"dynamo_dropin: dynamo.nixl_connect is {sys.modules.get('dynamo.nixl_connect', 'Dynamo own')}",
          file=sys.stderr)


#: Dynamo's modules that made a memwire Connector (Dynamo imports nixl_connect inside its
#: functions, so its modules' globals rarely hold it: who called Connector() says it).
_connector_makers = set()


def _count_connectors_made_by_dynamo(memwire):
    init = memwire.Connector.__init__

    def counted_init(self, *args, **kwargs):
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name.startswith("dynamo.") and not name.startswith("dynamo.nixl_connect"):
                _connector_makers.add(name)
                break
            frame = frame.f_back
        init(self, *args, **kwargs)

    memwire.Connector.__init__ = counted_init


def _own_nixl_connect_loaded():
    """Modules loaded from Dynamo's own nixl_connect package (never, on memwire)."""
    return sorted(name for name, module in list(sys.modules.items())
                  if os.sep + os.path.join("dynamo", "nixl_connect") in (getattr(module, "__file__", None) or ""))


def _nixl_connect_users():
    """Dynamo's loaded modules by the nixl_connect they hold: ({memwire users}, {others})."""
    memwire_users, dynamo_users = set(), set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("dynamo.") or name.startswith("dynamo.nixl_connect") or module is None:
            continue
        for value in list(vars(module).values()):
            # A module held (import dynamo.nixl_connect as ...) or a name taken from one (from
            # dynamo.nixl_connect import Connector): where it was defined says whose it is.
            home = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None)
            if not isinstance(home, str):
                continue
            if home == "memwire" or home.startswith("memwire."):
                memwire_users.add(name)
            elif home.startswith("dynamo.nixl_connect"):
                dynamo_users.add(name)
    return memwire_users, dynamo_users


def pytest_sessionfinish(session, exitstatus):
    """On memwire, says which memwire Dynamo's modules used, and fails the run when any of them
    holds Dynamo's own nixl_connect: a test that passed there proved nothing about memwire."""
    if os.environ.get("MEMWIRE_DYNAMO_SYSTEM", "memwire") != "memwire":
        return
    import memwire

    memwire_users, dynamo_users = _nixl_connect_users()
    memwire_users |= _connector_makers
    dynamo_users |= set(_own_nixl_connect_loaded())
    where = os.path.dirname(memwire.__file__)
    print(f"dynamo_dropin: memwire imported from {where}; Dynamo's modules on it: "
          f"{', '.join(sorted(memwire_users)) or 'none'}", file=sys.stderr)
    if dynamo_users or sys.modules.get("dynamo.nixl_connect") is not memwire:
        print("dynamo_dropin: FAILED: Dynamo's own nixl_connect is in use: "
              f"{', '.join(sorted(dynamo_users)) or 'dynamo.nixl_connect'}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
