"""Regenerate the gRPC code in hypermnesia/v1/ from protos/hypermnesia/v1/*.proto.

The proto package `hypermnesia.v1` maps onto the Python package `hypermnesia.v1`, so the
generated imports (`from hypermnesia.v1 import common_pb2`) are already package paths and need
no rewriting. Run with the pinned grpcio-tools from the `dev` extra: `python scripts/gen_protos.py`.
`tests/test_protos.py` regenerates into a temporary folder and fails on any difference.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PROTO_DIR = PROTO_ROOT / "hypermnesia" / "v1"


def generate(out_root: Path) -> list[Path]:
    """Generate _pb2, _pb2_grpc and their .pyi files under out_root/hypermnesia/v1; return them."""
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(PROTO_DIR.glob("*.proto"))
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        # Typed asyncio stubs from mypy-protobuf (the `dev` extra), installed beside this Python.
        f"--plugin=protoc-gen-mypy_grpc={Path(sys.executable).parent / 'protoc-gen-mypy_grpc'}",
        f"--mypy_grpc_out=async_only:{out_root}",
        *[str(p.relative_to(PROTO_ROOT)) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")
    out_dir = out_root / "hypermnesia" / "v1"
    return sorted(p for p in out_dir.iterdir() if p.suffix in {".py", ".pyi"} and p.name != "__init__.py")


def main() -> None:
    written = generate(ROOT)
    init = ROOT / "hypermnesia" / "v1" / "__init__.py"
    if not init.exists():
        init.write_text('"""Generated gRPC contracts (scripts/gen_protos.py); do not edit."""\n')
    for path in written:
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
