"""Shared harness of the benchmark scripts: one cell per fresh subprocess, JSON back, medians, reports.

Stdlib only, so that a driver importing it never imports torch (a worker's `ru_maxrss` must be its own). The
scripts import it as `harness` (run as `python benchmarks/X.py`, their directory is on `sys.path`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
MIN_MEM_BASE_MIB = 1.0  # below this a baseline's extra memory is noise: no memory ratio

T = TypeVar("T")
C = TypeVar("C", bound="BaseCell")


# --------------------------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------------------------


def csv_list(text: str) -> list[str]:
    """The non-empty, stripped items of a comma list."""
    return [item.strip() for item in text.split(",") if item.strip()]


def file_sha(path: str | Path) -> str:
    """The first 12 hex digits of a file's SHA-256."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def clock(seconds: float) -> str:
    """`seconds` as h:mm:ss."""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60:d}:{minutes % 60:02d}:{secs:02d}"


def ratio_text(value: float | None) -> str:
    """A ratio as `1.23x` / `12.3x` / `123x`, or `-` for None."""
    if value is None:
        return "-"
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x" if value < 100 else f"{value:.0f}x"


def matmul_rate(torch: Any, n: int = 2048, repeats: int = 3) -> float:
    """GFLOP/s of one n x n fp32 matmul (median of `repeats`)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table (header, separator, rows), newline-terminated."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def default_repeats(requested: int | None, length: int, long: int) -> int:
    """Timed calls per cell: `requested`, else 3, or 1 at `length >= long`."""
    return requested or (1 if length >= long else 3)


def select_names(requested: str, known: Sequence[str], what: str) -> list[str]:
    """The names in comma list `requested` ('all': every known one); exits on unknown ones."""
    if requested == "all":
        return list(known)
    names = csv_list(requested)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown {what}(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def scheme_names(requested: str) -> list[str]:
    """The registered schemes (read in a subprocess so that the driver never imports torch)."""
    code = "from lextra.positions import SCHEMES; print(','.join(SCHEMES.names()))"
    known = csv_list(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    return select_names(requested, known, "scheme")


# --------------------------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------------------------


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the uninformative None / False ones."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def add_quick_repeats(parser: argparse.ArgumentParser, quick: Sequence[int], long: int) -> None:
    """Add `--quick` (lengths `quick`) and `--repeats` (default 3, or 1 at L >= `long`)."""
    lengths = ",".join(map(str, quick))
    parser.add_argument("--quick", action="store_true", help=f"smoke run: lengths {lengths} (overrides --lengths)")
    parser.add_argument(
        "--repeats", type=int, default=None, help=f"timed calls per cell [default: 3, or 1 at L >= {long}]"
    )


def add_threads(parser: argparse.ArgumentParser) -> None:
    """Add `--threads` (torch / OpenMP threads per cell)."""
    parser.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads per cell")


def add_cell_timeout(parser: argparse.ArgumentParser, seconds: float) -> None:
    """Add `--cell-timeout`."""
    parser.add_argument("--cell-timeout", type=float, default=seconds, help="seconds before a cell is abandoned")


def add_out_worker(parser: argparse.ArgumentParser, out: str) -> None:
    """Add `--out` (default `out`) and the hidden `--worker SPEC`."""
    parser.add_argument("--out", type=Path, default=Path(out), help="JSON output")
    parser.add_argument("--worker", help=argparse.SUPPRESS)


# --------------------------------------------------------------------------------------------------------------
# worker side (the measuring subprocess)
# --------------------------------------------------------------------------------------------------------------


def rss_now_kib() -> int:
    """Current resident set size in KiB (VmRSS), or -1 where /proc is unavailable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def peak_rss_kib() -> int:
    """The process's peak resident set size so far (`ru_maxrss`, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def timed_calls(call: Callable[[], object], repeats: int) -> tuple[list[float], int, int]:
    """Time `repeats` calls of `call` (its result dropped at once): times in ms, peak RSS KiB before and after."""
    peak_before = peak_rss_kib()
    times_ms = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times_ms.append((time.perf_counter() - start) * 1e3)
    return times_ms, peak_before, peak_rss_kib()


def worker_main(run_cell: Callable[[dict[str, Any]], dict[str, Any]], raw: str, error_chars: int | None = 500) -> int:
    """Worker entry: run one cell from its JSON spec and print the JSON result (or the error) as the last line."""
    spec = json.loads(raw)
    try:
        result = run_cell(spec)
    except Exception as exc:  # e.g. RuntimeError (allocation failed), MemoryError: the driver records it
        result = {"error": f"{type(exc).__name__}: {str(exc)[:error_chars]}"}
    print(json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------------------------------
# driver side
# --------------------------------------------------------------------------------------------------------------


@dataclass
class BaseCell:
    """What every measured cell has: its worker's result and the wall time of its subprocess."""

    result: dict[str, Any] = field(default_factory=dict, kw_only=True)
    wall_s: float = field(default=0.0, kw_only=True)

    @property
    def ok(self) -> bool:
        """Whether the cell ran and measured a time."""
        return "error" not in self.result and "time_ms" in self.result


def run_worker(script: Path, spec: dict[str, Any], threads: int, timeout: float) -> dict[str, Any]:
    """Run `script --worker SPEC` in a fresh interpreter with `threads` OpenMP / MKL threads; return its JSON."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, str(script), "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:g} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    reason = f"exit status {proc.returncode}"
    if proc.returncode < 0:
        reason = f"killed by signal {-proc.returncode}" + (" (out of memory?)" if proc.returncode == -9 else "")
    return {"error": reason, "stderr_tail": proc.stderr[-2000:]}


def run_cells(
    cells: Sequence[C],
    script: Path,
    spec: Callable[[C], dict[str, Any]],
    threads: int,
    timeout: float,
    label: Callable[[C], str],
    detail: Callable[[dict[str, Any]], str],
    error_chars: int | None = None,
) -> float:
    """Run every cell in its own subprocess, with a progress line each on stderr; returns the total seconds."""
    t0 = time.perf_counter()
    for i, cell in enumerate(cells, 1):
        progress = f"[{i:3d}/{len(cells)}] {clock(time.perf_counter() - t0)} {label(cell)}"
        print(progress, end="", file=sys.stderr, flush=True)
        start = time.perf_counter()
        cell.result = run_worker(script, spec(cell), threads, timeout)
        cell.wall_s = time.perf_counter() - start
        text = detail(cell.result) if cell.ok else f"ERROR {cell.result['error'][:error_chars]}"
        print(f" {text}  ({cell.wall_s:.1f} s)", file=sys.stderr, flush=True)
    return time.perf_counter() - t0


def interleave(items: Sequence[T], every: int, baseline: Callable[[], T]) -> list[T]:
    """`items` with a baseline first, again before every `every`-th item, and last."""
    out = [baseline()]
    for i, item in enumerate(items):
        if i and i % every == 0:
            out.append(baseline())
        out.append(item)
    out.append(baseline())
    return out


def summarise_baselines(
    runs: Sequence[C], lengths: Sequence[int], summary: Callable[[list[C], list[float]], dict[str, Any]]
) -> dict[int, dict[str, Any]]:
    """Per L: `summary(ok runs at L, their median times)`, or an error entry when every baseline run failed."""
    out: dict[int, dict[str, Any]] = {}
    for L in lengths:
        ok = [c for c in runs if getattr(c, "length", None) == L and c.ok]
        out[L] = summary(ok, [c.result["time_ms"] for c in ok]) if ok else {"error": "every baseline run failed"}
    return out


def machine_meta(threads: int, sources: Sequence[str]) -> dict[str, Any]:
    """Versions, CPU, date, load and the hashes of `sources` (paths under the repository; torch read aside)."""
    code = "import torch; print(torch.__version__)"
    torch_version = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    hashes = {}
    for rel in sources:
        path = ROOT / rel
        hashes[rel] = file_sha(path) if path.exists() else None
    return {
        "torch": torch_version,
        "python": platform.python_version(),
        "threads": threads,
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "loadavg_start": os.getloadavg(),
        "thp_mem_alloc_enable": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "source_sha256_12": hashes,
    }


def finish_meta(meta: dict[str, Any], total_s: float, cells: Sequence[BaseCell], backends_sha: bool = True) -> None:
    """Add the run's total time and closing load; with `backends_sha`, the backends.py hashes the workers saw."""
    meta.update(total_seconds=round(total_s, 1), loadavg_end=os.getloadavg())
    if backends_sha:
        shas = sorted({c.result["backends_sha"] for c in cells if c.result.get("backends_sha")})
        if len(shas) > 1:
            print(f"warning: backends.py changed during the run (sha {shas})", file=sys.stderr)
        meta["backends_sha_seen"] = shas


def load_text(meta: dict[str, Any]) -> str:
    """The load averages at the start and end of the run, for a report footer."""
    return f"load average {meta['loadavg_start'][0]:.1f} at start, {meta['loadavg_end'][0]:.1f} at end"


def write_report(out: Path, data: dict[str, Any], report: str) -> None:
    """Print `report`, then write `data` as JSON to `out` and `report` next to it as `.md`."""
    print(report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    out.with_suffix(".md").write_text(report)
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
