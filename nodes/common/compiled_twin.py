"""How a module picks between a compiled twin and the Python code it mirrors.

Each compiled module (setup.py: the pull decoder, the batch-body and record codecs, the
record check, the read scan) is optional and stays second to its Python reference: a module loads the twin at
import unless its switch (`MQLAB_PURE_PYTHON_...=1`) says not to, and falls back to Python when
the extension was not built or refuses this process's record layout. The word it keeps beside
the function says which one runs, for tests and logs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


def load_twin(load: Callable[[], F], what: str, pure_python_env: str) -> tuple[F | None, str]:
    """(`load()`, "compiled"), or (None, "python (why)") when `pure_python_env` is "1", the
    extension is not built (ImportError) or it refused the layout `load` gave it (TypeError,
    ValueError from its init)."""
    if os.environ.get(pure_python_env) == "1":
        return None, f"python ({pure_python_env}=1)"
    try:
        return load(), "compiled"
    except ImportError as exc:
        return None, f"python (the compiled {what} is not built: {exc})"
    except (TypeError, ValueError) as exc:
        return None, f"python (the compiled {what} refused this layout: {exc})"
