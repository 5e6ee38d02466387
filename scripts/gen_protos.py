"""Regenerate (or, with --check, verify) the gRPC stubs under services/strongroom/api/v1.

protoc emits `from strongroom.v1 import x_pb2`; the stubs live in the package
`strongroom.api.v1`, so the imports are rewritten to that path.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUT = ROOT / "services" / "strongroom" / "api" / "v1"
IMPORT_RE = re.compile(r"^from strongroom\.v1 import ", re.MULTILINE)


def generate(dest: Path) -> None:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "strongroom" / "v1").glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        dest.mkdir(parents=True, exist_ok=True)
        for f in sorted((Path(tmp) / "strongroom" / "v1").iterdir()):
            text = IMPORT_RE.sub("from strongroom.api.v1 import ", f.read_text())
            (dest / f.name).write_text(text)
        (dest / "__init__.py").write_text('"""Generated gRPC stubs. Do not edit: run `make protos`."""\n')


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="fail if the committed stubs are stale")
    opts = parser.parse_args()
    if not opts.check:
        if OUT.exists():
            shutil.rmtree(OUT)
        generate(OUT)
        print(f"generated stubs in {OUT.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "v1"
        generate(fresh)
        names = sorted(p.name for p in fresh.iterdir())
        have = sorted(p.name for p in OUT.iterdir() if p.is_file()) if OUT.exists() else []
        _, mismatch, errors = filecmp.cmpfiles(fresh, OUT, names, shallow=False)
        if mismatch or errors or names != have:
            print(f"stale stubs: {mismatch + errors or sorted(set(names) ^ set(have))}; run `make protos`", file=sys.stderr)
            return 1
    print("stubs are fresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
