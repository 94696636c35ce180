"""The PEP 517 backend pyproject.toml names: scikit-build-core when it can be imported, else
setuptools with setup.py. Both drive the same CMake project (parts sdk;sideband plus python/) and
make the same wheel: memwire/*.py, the extension, libmemwire.so.0 and libmemwire-sideband.so.0
beside it ($ORIGIN rpath).

Under pip's build isolation scikit-build-core is always there (build-system.requires). The
fallback is for the offline recipe (--no-build-isolation --no-index against Debian 12's Python,
whose archive has python3-setuptools and python3-pybind11 but no scikit-build-core).
"""

import sys

try:
    from scikit_build_core import build as _backend
except ImportError:
    from setuptools import build_meta as _backend

    print("memwire: scikit-build-core is not installed: building with setuptools (setup.py)",
          file=sys.stderr)

# The mandatory hooks and the optional ones the backend has (pip asks with hasattr).
for _hook in ("build_wheel", "build_sdist", "get_requires_for_build_wheel",
              "get_requires_for_build_sdist", "prepare_metadata_for_build_wheel", "build_editable",
              "get_requires_for_build_editable", "prepare_metadata_for_build_editable"):
    if hasattr(_backend, _hook):
        globals()[_hook] = getattr(_backend, _hook)
del _hook
