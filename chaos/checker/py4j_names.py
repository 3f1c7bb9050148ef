"""Remember which Java class, package or static method a name stands for, once per gateway.

PySpark reaches the JVM by name on every call: `sc._jvm.PythonUtils`, `functions.col` and the like
each ask the JVM over py4j what the name is. The JVM answers a short name by trying it as a class in
every package the view imports, and each miss walks all of PySpark's jar files (about 280): on
small histories (the checker tests', a short run's) those lookups were about a twentieth of the
JVM's CPU, and their round trips a good part of the Python driver's. What a name stands for does not change while the JVM runs
(imports are only ever added), so the answer is kept: classes, packages and static methods, never a
static field's value and never a failure.
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JavaPackage, JVMView

_CACHEABLE = (JavaClass, JavaPackage, JavaMember)


def _remembering(original: Any, key_of: Any) -> Any:
    def lookup(self: Any, name: str) -> Any:
        # one dict per gateway client, held on the client: a new session's gateway starts empty
        client = self._gateway_client
        known = client.__dict__.setdefault("_mqlab_names", {})
        key = key_of(self, name)
        try:
            return known[key]
        except KeyError:
            pass
        found = original(self, name)
        if isinstance(found, _CACHEABLE):
            known[key] = found
        return found

    lookup.__wrapped__ = original  # type: ignore[attr-defined]
    return lookup


def remember_java_names() -> None:
    """Patch py4j's name lookups (idempotent)."""
    if hasattr(JVMView.__getattr__, "__wrapped__"):
        return
    JVMView.__getattr__ = _remembering(JVMView.__getattr__, lambda view, name: ("view", view._id, name))
    JavaPackage.__getattr__ = _remembering(JavaPackage.__getattr__,
                                           lambda package, name: ("package", package._jvm_id, package._fqn, name))
    JavaClass.__getattr__ = _remembering(JavaClass.__getattr__, lambda cls, name: ("class", cls._fqn, name))
