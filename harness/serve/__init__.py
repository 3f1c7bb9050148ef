"""`mqlab serve`: a live web view of local clusters and chaos runs, and an index of past runs.

Modules: `faults` (nemesis.jsonl read incrementally into fault windows), `runs` (past run dirs
and matrices under a runs dir), `live` (one running cluster polled through `harness.cluster_admin`),
`app` (the Starlette app and its JSON endpoints), `command` (the CLI command), `static/` (pages).

Nothing here is imported by `harness.cli` beyond `command`, which imports the web framework only
when the server starts, so other `mqlab` commands do not pay for it.
"""
