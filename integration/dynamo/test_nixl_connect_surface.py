"""The nixl_connect names that the installed Dynamo's components use, and whether memwire's
drop-in has each: so that the next Dynamo release shows its gaps here, not in a user's traceback.

Read statically from the installed wheels (ai-dynamo, ai-dynamo-runtime): every module under
``dynamo/`` that imports ``dynamo.nixl_connect`` (tests excluded) is parsed, and
- every name it takes from the module (``nixl_connect.X``, ``from dynamo.nixl_connect import X``,
  also through an alias kept on ``self``) must be a name of ``memwire``;
- every attribute it reads or writes (``obj.name``) that nixl_connect's own source defines on
  one of its classes (methods, properties, fields, ``self.x`` set in a method, inherited ones
  included) must exist on memwire's class of the same name.
The second rule is wide on purpose (``desc._data_size``, ``connector._create_connection``): a name
such as ``size`` that Dynamo reads from some other object still has to exist on memwire's
class, which costs nothing where memwire keeps nixl_connect's names.
"""

import ast
import importlib.util
import os
import sys

import pytest

import memwire

# Classes of nixl_connect that memwire does not offer, with why (the README's compatibility
# table says the same). Their members are not required.
NOT_OFFERED = {
    "AbstractOperation": "an abstract base; memwire's four operations are checked instead",
    "ActiveOperation": "an abstract base; memwire's ReadOperation and WriteOperation are checked",
    "PassiveOperation": "an abstract base; ReadableOperation and WritableOperation are checked",
    "Remote": "a NIXL agent's remote handle: memwire's metadata carries the owner's endpoint",
    "_NixlImportProxy": "nixl_connect's stand-in for missing NIXL bindings",
}
# pydantic's API of nixl_connect's BaseModel classes that nixl_connect's users call.
PYDANTIC_NAMES = {"model_dump", "model_dump_json", "model_validate", "model_validate_json"}


def _dynamo_root():
    spec = importlib.util.find_spec("dynamo")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("Dynamo is not installed (integration/dynamo/run makes its venv)")
    for folder in spec.submodule_search_locations:
        if os.path.exists(os.path.join(folder, "nixl_connect", "__init__.py")):
            return folder
    pytest.fail("the installed Dynamo has no dynamo/nixl_connect/__init__.py")


def _nixl_classes(source):
    """{class name: set of member names, inherited ones included} from nixl_connect's source."""
    tree = ast.parse(source)
    own, bases = {}, {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        names = set()
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(item.name)
                for inner in ast.walk(item):
                    if (isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store)
                            and isinstance(inner.value, ast.Name) and inner.value.id == "self"):
                        names.add(inner.attr)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.Assign):
                names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        names.discard("model_config")
        if any(isinstance(b, ast.Name) and b.id == "BaseModel" for b in node.bases):
            names |= PYDANTIC_NAMES
        own[node.name] = names
        bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]

    def members(name):
        found = set(own.get(name, ()))
        for base in bases.get(name, ()):
            found |= members(base)
        return found

    return {name: members(name) for name in own}


def _is_nixl_connect(node):
    """Whether an import node brings in dynamo.nixl_connect; returns the local names it binds to
    the module and the names it takes from it."""
    modules, names = set(), set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name == "dynamo.nixl_connect":
                modules.add(alias.asname or "dynamo")
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
        if node.module == "dynamo":
            modules |= {a.asname or a.name for a in node.names if a.name == "nixl_connect"}
        elif node.module == "dynamo.nixl_connect":
            names |= {a.name for a in node.names}
    return modules, names


def _uses(path):
    """(module names taken, attribute names touched) of one Dynamo source file, or None when it
    does not import dynamo.nixl_connect."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    aliases, taken = set(), set()
    for node in ast.walk(tree):
        modules, names = _is_nixl_connect(node)
        aliases |= modules
        taken |= names
    if not aliases and not taken:
        return None
    kept = set()  # attributes of self (or another object) that hold the module
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            kept |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)}
    touched = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        holder = node.value
        if isinstance(holder, ast.Attribute) and holder.attr == "nixl_connect" and \
                isinstance(holder.value, ast.Name) and holder.value.id in aliases:
            taken.add(node.attr)  # dynamo.nixl_connect.X
        elif isinstance(holder, ast.Name) and holder.id in aliases and holder.id != "dynamo":
            taken.add(node.attr)  # nixl_connect.X
        elif isinstance(holder, ast.Attribute) and holder.attr in kept:
            taken.add(node.attr)  # self._nixl_connect.X
        else:
            touched.add(node.attr)
    return taken, touched


def _component_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("tests", "nixl_connect", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py") and not name.startswith("test_"):
                yield os.path.join(folder, name)


def test_memwire_has_every_nixl_connect_name_dynamo_uses():
    root = _dynamo_root()
    with open(os.path.join(root, "nixl_connect", "__init__.py"), encoding="utf-8") as source:
        classes = _nixl_classes(source.read())
    users, taken, touched = [], {}, {}
    for path in _component_files(root):
        uses = _uses(path)
        if uses is None:
            continue
        where = os.path.relpath(path, os.path.dirname(root))
        users.append(where)
        for name in uses[0]:
            taken.setdefault(name, []).append(where)
        for name in uses[1]:
            touched.setdefault(name, []).append(where)
    assert users, "no Dynamo component imports dynamo.nixl_connect: the scan is broken"

    missing, covered = [], []
    for name, where in sorted(taken.items()):
        (covered if hasattr(memwire, name) else missing).append(f"nixl_connect.{name}  ({where[0]})")
    for cls, members in sorted(classes.items()):
        if cls in NOT_OFFERED:
            continue
        ours = getattr(memwire, cls, None)
        for name in sorted(members & touched.keys()):
            line = f"{cls}.{name}  ({touched[name][0]})"
            if ours is None:
                missing.append(line + f"  [memwire has no {cls}]")
            else:
                (covered if hasattr(ours, name) else missing).append(line)
    print(f"\n{len(users)} Dynamo components import dynamo.nixl_connect: {', '.join(users)}")
    print(f"nixl_connect names they use that memwire has ({len(covered)}):")
    print("\n".join("  " + line for line in covered))
    assert not missing, "nixl_connect names Dynamo uses that memwire lacks:\n  " + "\n  ".join(missing)


def test_the_scan_finds_what_dynamo_is_known_to_use():
    """The scan itself can fail: on Dynamo 1.6.1 it must see the members the issue listed."""
    root = _dynamo_root()
    touched, taken = set(), set()
    for path in _component_files(root):
        uses = _uses(path)
        if uses:
            taken |= uses[0]
            touched |= uses[1]
    assert {"Connector", "Descriptor", "RdmaMetadata", "SerializedDescriptor"} <= taken
    assert {"_create_connection", "register_with_connector", "_data_size", "_data_ref"} <= touched


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s"]))
