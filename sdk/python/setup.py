"""Build hook: generate the gRPC stubs from the repository's proto/ tree.

The stubs are never checked in. `build_py` (used by every wheel build,
editable or not) runs grpcio-tools' protoc on the `.proto` files and writes
the modules into the package as `agentsessions.v1.*_pb2`. The protos are
looked up, in order, in `$AGENTSESSIONS_PROTO_DIR`, `<sdk>/proto` (where an
sdist vendors them) and `<sdk>/../../proto/proto` (the repository checkout).
"""

import os
import re
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py
from setuptools.command.sdist import sdist as _sdist

HERE = Path(__file__).resolve().parent
PACKAGE = "agentsessions"
SUBPACKAGE = "v1"


def proto_dir() -> Path:
    candidates = []
    env = os.environ.get("AGENTSESSIONS_PROTO_DIR")
    if env:
        candidates.append(Path(env))
    candidates += [HERE / "proto", HERE.parent.parent / "proto" / "proto"]
    for c in candidates:
        if c.is_dir() and any(c.glob("*.proto")):
            return c
    raise SystemExit(
        "agentsessions: no .proto files found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); set AGENTSESSIONS_PROTO_DIR"
    )


# grpcio-tools stamps the generated service stubs with the grpcio version it
# shipped with and refuses an older runtime; the stubs use only long-stable
# grpcio APIs, so the check is dropped and `grpcio>=1.60` suffices.
_VERSION_CHECK = re.compile(
    r"\nGRPC_GENERATED_VERSION = .*?\n(?=class |\Z)", re.DOTALL
)


_REGISTERED = re.compile(r",\s*_registered_method=True\)")


def generate(out_root: Path) -> None:
    """Writes agentsessions/v1/*_pb2*.py under out_root."""
    import grpc_tools
    from grpc_tools import protoc

    src = proto_dir()
    target = out_root / PACKAGE / SUBPACKAGE
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # The protos import each other by bare name ("common.proto"); placed
        # under agentsessions/v1/ the generated modules import each other
        # as agentsessions.v1.* instead of as top-level modules.
        staged = Path(tmp) / PACKAGE / SUBPACKAGE
        staged.mkdir(parents=True)
        names = sorted(p.name for p in src.glob("*.proto"))
        for name in names:
            text = (src / name).read_text(encoding="utf-8")
            for other in names:
                text = text.replace(
                    f'import "{other}";', f'import "{PACKAGE}/{SUBPACKAGE}/{other}";'
                )
            (staged / name).write_text(text, encoding="utf-8")
        include = Path(grpc_tools.__file__).resolve().parent / "_proto"
        args = [
            "grpc_tools.protoc",
            f"-I{tmp}",
            f"-I{include}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
        ] + [f"{PACKAGE}/{SUBPACKAGE}/{n}" for n in names]
        if protoc.main(args) != 0:
            raise SystemExit("agentsessions: grpc_tools.protoc failed")
    for stub in target.glob("*_pb2_grpc.py"):
        text = _VERSION_CHECK.sub("\n", stub.read_text(encoding="utf-8"))
        # `_registered_method` appeared in grpcio 1.63; older runtimes
        # refuse the keyword, and it is only an optimisation.
        text = _REGISTERED.sub(")", text)
        stub.write_text(text, encoding="utf-8")
    (target / "__init__.py").write_text(
        '"""Generated protobuf and gRPC modules of agentsessions.v1 (do not edit)."""\n',
        encoding="utf-8",
    )


class build_py(_build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            generate(HERE / "src")
        else:
            generate(Path(self.build_lib))


class sdist(_sdist):
    """Vendors the protos so the sdist builds without the repository."""

    def make_release_tree(self, base_dir, files):  # type: ignore[override]
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / "proto"
        dest.mkdir(exist_ok=True)
        for p in proto_dir().glob("*.proto"):
            shutil.copy2(p, dest / p.name)


setup(cmdclass={"build_py": build_py, "sdist": sdist})
