"""Building a native library (`scheduler_core.native_build`) from several processes at once."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_processes_building_one_library_at_once_compile_it_once(tmp_path: Path) -> None:
    compiles = tmp_path / "compiles"
    compiler = tmp_path / "slow-cc"
    # Notes each compile, takes long enough for the other process to arrive, writes the output.
    compiler.write_text(f'#!/bin/sh\necho compile >> {compiles}\nsleep 2\n'
                        'while [ "$1" != "-o" ]; do shift; done\necho library > "$2"\n')
    compiler.chmod(0o755)
    source = tmp_path / "kernel.c"
    source.write_text("int kernel;\n")
    code = ("import sys; from pathlib import Path; from scheduler_core.native_build import build; "
            f"print(build(Path({str(source)!r}), ('-O2',), compiler={str(compiler)!r}, "
            f"directory=Path({str(tmp_path / 'cache')!r})))")
    builders = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
                for _ in range(2)]
    paths = {builder.communicate(timeout=120)[0].strip() for builder in builders}
    assert all(builder.returncode == 0 for builder in builders)
    assert len(paths) == 1 and Path(paths.pop()).read_text() == "library\n"
    assert compiles.read_text().splitlines() == ["compile"]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [p.name for p in (tmp_path / "cache").glob("*.so")]


def test_the_install_step_builds_or_names_every_native_piece() -> None:
    """``python -m scheduler_core.kernels`` (``make install``): one line per piece, each built (the
    file in the kernel cache) or not available on this machine; never an error."""
    import shutil

    from scheduler_core import kernels
    from scheduler_core.amx_linear import cpu_has_amx

    lines: list[str] = []
    results = dict(kernels.build_all(lines.append))
    assert list(results) == [name for name, _ in kernels.PIECES]
    assert [line.split(": ")[0] for line in lines] == list(results)
    if shutil.which("cc"):
        assert (results["decode attention (C)"] or "").startswith("decode_attention-")
    if shutil.which("c++"):
        assert (results["the simulator's core (C++)"] or "").startswith("native_core-")
    assert (results["AMX projections (C)"] is None) == (not cpu_has_amx())
