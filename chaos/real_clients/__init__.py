"""Real RocketMQ clients as the consumers of a chaos run (`mqlab chaos run SUITE --client cpp|ons|py5|py5-simple|node5`).

The wrappers here (`cpp_consumer.py`, `ons_consumer.js`, `py5/consumer.py`, in push or simple mode,
`node5/consumer.js`) are scripts the
harness runs in place of `python -m nodes consumer`; they import nothing from mqlab. `wiring` turns a suite's cluster into
one whose consumer nodes are real clients behind the harness's link proxies.
"""

from chaos.real_clients.wiring import (
    CHECKS_SET_ASIDE,
    CLIENTS,
    MQLAB,
    RealClient,
    RealClientError,
    checks_added,
    checks_set_aside,
    client_for_suite,
    is_mixed,
    real_client,
    spec_for,
    wire,
)

__all__ = ["CHECKS_SET_ASIDE", "CLIENTS", "MQLAB", "RealClient", "RealClientError", "checks_added", "checks_set_aside", "client_for_suite", "is_mixed", "real_client", "spec_for", "wire"]
