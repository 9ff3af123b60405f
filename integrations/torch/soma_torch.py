"""The old name of soma.torch, kept so that `import soma_torch` goes on working.

It puts the python/ folder of the tree it lives in (the repository, or a build tree, where
CMake copies both) first on sys.path, so it uses the soma package of its own tree, then
stands aside for soma.torch itself: `soma_torch` and `soma.torch` are one module, one state.
New code: `import soma.torch`.
"""

import os
import sys

_tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_package_root = os.path.join(_tree, "python")
if os.path.exists(os.path.join(_package_root, "soma", "__init__.py")) and \
        _package_root not in sys.path:
    sys.path.insert(0, _package_root)

import soma.torch  # noqa: E402 (after the path is set)

sys.modules[__name__] = soma.torch
