#!/usr/bin/env python3
"""Regenerate proto/*_pb2.py, *_pb2_grpc.py and *.pyi from proto/*.proto.

Runs grpc_tools.protoc from the repo root into a temporary directory, so the generated
imports read `from proto import common_pb2`. With `--check` it only compares and exits 1
when the committed files differ from what the .proto sources produce (CI runs this).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO_DIR = REPO / "proto"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    import grpc_tools
    from grpc_tools import protoc  # dev dependency: grpcio-tools

    # google/protobuf/*.proto (Duration, Timestamp) ship inside grpc_tools
    well_known = Path(grpc_tools.__file__).parent / "_proto"

    sources = sorted(p.relative_to(REPO).as_posix() for p in PROTO_DIR.glob("*.proto"))
    if not sources:
        sys.exit("no .proto files under proto/")
    (out_dir / "proto").mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{REPO}", f"-I{well_known}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}", *sources]
    if protoc.main(args) != 0:
        sys.exit("protoc failed; see the messages above")
    return sorted(p for p in (out_dir / "proto").iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        produced = generate(Path(tmp))
        committed = {p.name for p in PROTO_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES)}
        stale = [p.name for p in produced if not (PROTO_DIR / p.name).exists()
                 or not filecmp.cmp(p, PROTO_DIR / p.name, shallow=False)]
        orphans = sorted(committed - {p.name for p in produced})
        if args.check:
            if stale or orphans:
                print(f"generated code is stale: {stale + orphans}; run scripts/gen_proto.py", file=sys.stderr)
                return 1
            print(f"generated code is up to date ({len(produced)} files)")
            return 0
        for p in produced:
            shutil.copyfile(p, PROTO_DIR / p.name)
        for name in orphans:
            (PROTO_DIR / name).unlink()
        print(f"wrote {len(produced)} files; removed {len(orphans)} orphans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
