"""The latest benchmark results (bench-results/*.json) as the Markdown table of
docs/performance.md: one row per bar, with the figure, the baseline measured in the same
run, the ratio and the verdict, then the machines, dates and load averages the results
come from.

Usage: python3 benches/summarize.py [DIR] [--all] [--update FILE]
  DIR       the results directory (default bench-results)
  --all     also the cases that carry no bar (every point of B4's curves, ...)
  --update  write the table into FILE between the lines
            `<!-- results: benches/summarize.py -->` and `<!-- end of results -->`
            instead of printing it
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

BEGIN = "<!-- results: benches/summarize.py -->"
END = "<!-- end of results -->"


def fmt(x: float) -> str:
    a = abs(x)
    if a >= 1e6:
        return f"{x / 1e6:.2f} M"
    if a >= 1e4:
        return f"{x / 1e3:.1f} k"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def verdict(met: bool | None, text: str | None = None) -> str:
    if met is None:
        return text or "—"
    return "yes" if met else "**no**"


def rows_of_cases(doc: dict, show_all: bool) -> list[str]:
    """Rows of a document in the common format (taskring-bench, b7_python.py, ...)."""
    out = []
    for c in doc["cases"]:
        v = c["value"]
        base = c.get("baseline")
        bfig = "—"
        if base:
            bname = base["name"].split(" (")[0].split(":")[0]
            bfig = f"{fmt(base['value']['median'])} {base['value']['unit']} ({bname})"
        ratio = f"{c['ratio']:.2f}" if c.get("ratio") is not None else "—"
        bars = c.get("bars") or []
        # A case without a bar is shown when it says it is reported (B12's Python column).
        reported = isinstance(c.get("extra"), dict) and c["extra"].get("reported") is True
        if not bars and not show_all and not reported:
            continue
        fig = f"{fmt(v['median'])} {v['unit']} ({fmt(v['min'])}–{fmt(v['max'])})"
        for i, b in enumerate(bars or [None]):
            first = i == 0
            text = b["text"] if b else ("reported" if reported else "—")
            out.append(
                f"| {doc['bench']} | {c['name']} | {fig if first else '″'} | {bfig if first else '″'} "
                f"| {ratio if first else '″'} | {text} | {verdict(b['met']) if b else '—'} |"
            )
    return out


def rows_of_metg(doc: dict) -> list[str]:
    """Rows of a B1 sweep (benches/taskbench/metg.py): one per bar."""
    out = []
    pattern = doc["params"]["pattern"]
    tr = doc["drivers"].get("taskring", {})
    metg = tr.get("metg_s")
    fig = f"{metg * 1e6:.2f} µs" if metg else "—"
    for b in doc["bars"]:
        v = b.get("value")
        shown = "—" if v is None else (f"{v * 1e6:.2f} µs" if v < 1e-3 else f"{v:.2f}×")
        out.append(
            f"| {doc['bench']} | METG(50%) {pattern} | {fig} | — | {shown if 'x' in b['desc'] else '—'} "
            f"| {b['desc'].replace('<=', '≤')} | {verdict(b['met'], b['verdict'])} |"
        )
    return out


def rows_of_b9_python(doc: dict) -> list[str]:
    """B9's decode step from Python (benches/b9_python.py): replay against the normal run."""
    out = []
    for c in doc["cases"]:
        run, rep = c["normal_run"], c["replay"]
        is_bar = c["name"] == "decode_step_builtin"
        out.append(
            f"| {doc['bench']} | {c['name']} | {fmt(rep['median'] * 1e3)} µs/step replayed "
            f"({fmt(rep['min'] * 1e3)}–{fmt(rep['max'] * 1e3)}) | {fmt(run['median'] * 1e3)} µs/step (run normally) "
            f"| {rep['median'] / run['median']:.2f} | {doc['bar']['text'].replace('>=', '≥') if is_bar else '—'} "
            f"| {verdict(doc['bar']['met']) if is_bar else '—'} |"
        )
    return out


def rows_of_b8(doc: dict) -> list[str]:
    """B8 (benches/b8_l4.py under taskring launch): round trip, throughput, transfers."""
    b = doc["bars"]
    rt = b["round_trip"]
    r = doc["results"]
    pp = r.get("mpi_ping_pong_pinned_us")
    if isinstance(pp, dict):
        pp = pp.get("median")
    ppfig = f"{fmt(pp)} µs" if isinstance(pp, (int, float)) else "—"
    out = [
        f"| b8_l4 | round trip, rank 0 and host 0 pinned one CPU apart | {fmt(rt['value_us'])} µs | "
        f"bar {fmt(rt['bar_us'])} µs = L3 + 3 × MPI ping-pong ({ppfig}) | {rt['value_us'] / rt['bar_us']:.2f} "
        f"| ≤ the L3 round trip + 3 × the ping-pong | {verdict(rt['met'])} |",
        f"| b8_l4 | round trip, nothing pinned | {fmt(rt['free']['value_us'])} µs | bar {fmt(rt['free']['bar_us'])} µs "
        f"| {rt['free']['value_us'] / rt['free']['bar_us']:.2f} | reported | — |",
        f"| b8_l4 | throughput, 2 hosts × 2 chips | {fmt(b['throughput']['value'])} L4 tasks/s | — | — "
        f"| ≥ {fmt(b['throughput']['bar'])} L4 tasks/s | {verdict(b['throughput']['met'])} |",
    ]
    for size in ("1MiB", "64MiB"):
        t = b[f"transfer_{size}"]
        out.append(
            f"| b8_l4 | {size[:-3]} MiB input to a host | {fmt(t['l4_MBps'])} MB/s | {fmt(t['mpi_MBps'])} MB/s (bare MPI) "
            f"| {t['fraction_of_bare']:.2f} | ≥ 50 % of bare MPI | {verdict(t['met'])} |"
        )
    return out


def rows_of_b10_python(doc: dict, show_all: bool) -> list[str]:
    if not show_all:
        return []
    med = doc["median_ns_per_task"]
    return [
        f"| {doc['bench']} | {k} kernel, Python orchestration | {fmt(v)} ns/task | "
        f"{fmt(med['builtin'])} ns/task (builtin) | {doc['ratio_to_builtin'][k]:.2f} | — | — |"
        for k, v in med.items()
        if k != "builtin"
    ]


def table(d: Path, show_all: bool) -> str:
    def order(p: Path) -> tuple[int, str]:
        m = re.match(r"b(\d+)", p.name)
        return (int(m.group(1)) if m else 99, p.name)

    docs = sorted(d.glob("b*.json"), key=order) + sorted(d.glob("peers*.json"))
    if not docs:
        raise SystemExit(f"summarize.py: no results in {d}")
    lines = [
        "| bench | case | figure: median (min–max) | baseline, same run | ratio | bar | met |",
        "|---|---|---|---|---|---|---|",
    ]
    machines: dict[str, list[tuple[int, str, str]]] = {}
    for p in docs:
        doc = json.loads(p.read_text())
        if doc["bench"].startswith("b9_python"):
            lines += rows_of_b9_python(doc)
        elif doc["bench"].startswith("b8"):
            lines += rows_of_b8(doc)
        elif "cases" in doc:
            lines += rows_of_cases(doc, show_all)
        elif "drivers" in doc and "bars" in doc:
            lines += rows_of_metg(doc)
        elif "median_ns_per_task" in doc:
            lines += rows_of_b10_python(doc, show_all)
            continue
        else:
            continue
        m = doc["machine"]
        if "cpu_model" in m:
            key = f"nproc {m['nproc']}, \"{m['cpu_model']}\", Linux {m['kernel']}"
            load = f"{m.get('loadavg_start', '?').split()[0]}–{m.get('loadavg_end', '?').split()[0]}"
        else:  # B8 writes the platform string and one load average
            key = f"nproc {m['cpus']}, {m['platform']}"
            load = f"{m['load'][0]:.2f} at the end"
        when = int(doc.get("unix_time") or p.stat().st_mtime)
        machines.setdefault(key, []).append((when, doc["bench"], load))
    lines.append("")
    for key, runs in sorted(machines.items()):
        t0 = min(t for t, _, _ in runs)
        t1 = max(t for t, _, _ in runs)
        span = time.strftime("%Y-%m-%d %H:%M", time.gmtime(t0)) + time.strftime("–%H:%M UTC", time.gmtime(t1))
        loads = ", ".join(f"{b} {ld}" for _, b, ld in sorted(runs))
        lines.append(f"Machine: {key}; run {span}; 1-minute load average at start–end: {loads}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    show_all = "--all" in argv
    update = None
    rest = []
    it = iter(argv)
    for a in it:
        if a == "--all":
            continue
        if a == "--update":
            update = Path(next(it))
            continue
        rest.append(a)
    text = table(Path(rest[0] if rest else "bench-results"), show_all)
    if update is None:
        sys.stdout.write(text)
        return 0
    page = update.read_text()
    if BEGIN not in page or END not in page:
        print(f"summarize.py: {update} has no `{BEGIN}` … `{END}` block", file=sys.stderr)
        return 2
    head, tail = page.split(BEGIN, 1)
    _, tail = tail.split(END, 1)
    update.write_text(f"{head}{BEGIN}\n{text}{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
