"""Draws one benchmark's table as a PNG: the figure docs/benchmarks.md shows above the table.

The plot is read from the table's own markdown (the section a bench-*.sh script has just written,
or the table it printed), never from numbers of its own, so plot and table cannot disagree.

    /usr/bin/python3 scripts/plot_bench.py KIND SOURCE.md OUT.png

KIND is the section's name (bench-launch, bench-store, bench-collectives, bench-rendezvous,
bench-scale, bench-startup). SOURCE.md is read between <!-- KIND:begin --> and <!-- KIND:end --> when it has
those markers, else whole (a bare table, as the --smoke runs hand over). A table that is not
there or not well formed exits 1 naming the file, the line and the fix.
"""
import re
import sys
from dataclasses import dataclass, field


class PlotError(Exception):
    pass


@dataclass
class Series:
    label: str
    xs: list = field(default_factory=list)
    ys: list = field(default_factory=list)


@dataclass
class Figure:
    """What one panel shows: its series, titles and scales."""
    title: str
    xlabel: str
    ylabel: str
    series: list
    xlog: bool = True
    ylog: bool = True
    hline: float = None  # a reference line (1x for ratios)
    x_is_bytes: bool = False  # ticks written 4 B, 1 KiB, ...
    categories: list = None  # stacked bars: one bar per category, one layer per series


# --- reading the markdown ---------------------------------------------------

def section(text, name):
    """The text between NAME's markers; the whole text when it has no markers at all."""
    m = re.search(rf"<!-- {re.escape(name)}:begin -->\n(.*?)<!-- {re.escape(name)}:end -->", text, re.S)
    if m:
        return m.group(1)
    if "<!-- " in text and ":begin -->" in text:
        raise PlotError(f"no section <!-- {name}:begin --> ... <!-- {name}:end -->; run "
                        f"scripts/{name}.sh to write it")
    return text


def tables(text):
    """Every markdown table of `text`: a list of (header cells, rows of cells). A row whose cell
    count is not the header's, or a table without its |---| line, raises PlotError."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if not lines[i].startswith("|"):
            i += 1
            continue
        header = cells(lines[i])
        if i + 1 >= len(lines) or not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            raise PlotError(f"line {i + 1}: a table header without its |---|---| line below it")
        rows, i = [], i + 2
        while i < len(lines) and lines[i].startswith("|"):
            row = cells(lines[i])
            if len(row) != len(header):
                raise PlotError(f"line {i + 1}: {len(row)} cells where the header has {len(header)}")
            rows.append(row)
            i += 1
        out.append((header, rows))
    if not out:
        raise PlotError("no markdown table (| a | b | lines) found")
    return out


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(cell):
    """The number a cell starts with ("0.0119 (-53%)" -> 0.0119), or None ("n/a", "not run")."""
    m = re.match(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", cell.replace(",", ""))
    return float(m.group(0)) if m else None


SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def size_bytes(cell):
    m = re.fullmatch(r"(\d+) (B|KiB|MiB|GiB)", cell)
    if not m:
        raise PlotError(f"size {cell!r}: expected a number and B, KiB, MiB or GiB")
    return int(m.group(1)) * SIZE_UNITS[m.group(2)]


def size_text(n):
    """4096 -> "4 KiB": the inverse of size_bytes for whole units."""
    for unit, scale in sorted(SIZE_UNITS.items(), key=lambda u: -u[1]):
        if n >= scale and n % scale == 0:
            return f"{int(n // scale)} {unit}"
    return f"{n:g} B"


def column(header, name):
    for i, h in enumerate(header):
        if h.startswith(name):
            return i
    raise PlotError(f"no column starting {name!r} in the header {header}")


def add(series, x, cell):
    y = number(cell)
    if y is not None:
        series.xs.append(x)
        series.ys.append(y)


def rows_matching(rows, pattern):
    """(int of the pattern's group 1, row) for each row whose first cell matches."""
    out = []
    for row in rows:
        m = re.match(pattern, row[0])
        if m:
            out.append((int(m.group(1)), row))
    return out


def nonempty(figure, what):
    if not any(s.xs for s in figure.series):
        raise PlotError(f"no {what} rows with numbers in the table")
    figure.series = [s for s in figure.series if s.xs]
    return figure


# --- one figure per benchmark -------------------------------------------------

def launch(tabs):
    header, rows = tabs[0]
    picked = rows_matching(rows, r"launch /bin/true x (\d+): wall seconds")
    series = [Series(header[c]) for c in (1, 2, 3)]
    for n, row in picked:
        for s, c in zip(series, (1, 2, 3)):
            add(s, n, row[c])
    return [nonempty(Figure("Launch /bin/true x N (median wall time)", "workers (N)", "seconds",
                            series), "launch x N")]


def store(tabs):
    header, rows = tabs[0]
    ops = [Series(header[1]), Series(header[2])]
    for n, row in rows_matching(rows, r"set/get/add, (\d+) client\(s\), ops/s$"):
        add(ops[0], n, row[1])
        add(ops[1], n, row[2])
    barrier = [Series(header[1]), Series(header[2])]
    for n, row in rows_matching(rows, r"barrier of (\d+) clients, seconds"):
        add(barrier[0], n, row[1])
        add(barrier[1], n, row[2])
    figs = [nonempty(Figure("Store throughput (set/get/add)", "clients", "ops/s", ops, ylog=False),
                     "set/get/add ops/s")]
    if any(s.xs for s in barrier):
        figs.append(nonempty(Figure("Barrier of N clients", "clients", "seconds", barrier), "barrier"))
    return figs


def collectives(tabs):
    header, rows = tabs[0]
    op, ranks, size = column(header, "op"), column(header, "ranks"), column(header, "size")
    ratio = column(header, "ccrun / torch")
    by_line = {}
    for row in rows:
        s = by_line.setdefault((row[op], row[ranks]), Series(f"{row[op]}, {row[ranks]} ranks"))
        add(s, size_bytes(row[size]), row[ratio])
    return [nonempty(Figure("Collectives: ccrun's speed / torch gloo's", "message size, bytes",
                            "speed ratio (> 1: ccrun faster)", list(by_line.values()), hline=1.0,
                            x_is_bytes=True),
                     "collectives with a torch column")]


def rendezvous(tabs):
    header, rows = tabs[0]
    series = [Series(header[c]) for c in (1, 2, 3)]
    for n, row in rows_matching(rows, r"rendezvous of (\d+) agents, ms"):
        for s, c in zip(series, (1, 2, 3)):
            add(s, n, row[c])
    return [nonempty(Figure("Rendezvous of N agents (last start to all ranks known)", "agents (N)",
                            "ms", series), "rendezvous of N agents")]


def scale(tabs):
    header, rows = tabs[0]
    n, store_col = column(header, "agents"), column(header, "store")
    form, restart = column(header, "form a round"), column(header, "restart round")
    by_store = {}
    for row in rows:
        x = number(row[n])
        if x is None:
            raise PlotError(f"agents {row[n]!r}: expected a number")
        add(by_store.setdefault(("form", row[store_col]), Series(f"{row[store_col]}: form a round")),
            x, row[form])
        add(by_store.setdefault(("restart", row[store_col]),
                                Series(f"{row[store_col]}: restart after a death")), x, row[restart])
    series = list(by_store.values())
    if len(tabs) > 1:  # torch's table: N against torch's time to form a round
        th, trows = tabs[1]
        torch = Series("torch 1.13 c10d: form a round")
        for trow in trows:
            add(torch, number(trow[column(th, "agents")]), trow[column(th, "torch 1.13 c10d: form")])
        series.append(torch)
    return [nonempty(Figure("Rendezvous at scale: time to form a round", "agents (N)", "seconds",
                            series), "agents")]


def startup(tabs):
    """Two panels of stacked bars (launch, and crash, to every rank's first step), one bar per
    launcher, one layer per phase of the slowest rank."""
    header, rows = tabs[0]
    launchers = [h.replace(" (cold / warm)", "") for h in header[1:4]]
    figs, current = [], None
    for row in rows:
        label = re.sub(r"[*]|&nbsp;", "", row[0]).strip()
        if not label.startswith("slowest rank:"):
            if label.startswith(("launch", "one rank crashes")):
                current = Figure(label.split("(")[0].strip(), "", "seconds", [], xlog=False,
                                 ylog=False, categories=launchers)
                figs.append(current)
            else:
                current = None
            continue
        if current is not None:
            s = Series(label.replace("slowest rank:", "").strip())
            for i in range(3):
                add(s, i, row[1 + i])
            current.series.append(s)
    if not figs:
        raise PlotError("no launch or crash rows in the table")
    return [nonempty(f, f.title) for f in figs]


KINDS = {"bench-launch": launch, "bench-store": store, "bench-collectives": collectives,
         "bench-rendezvous": rendezvous, "bench-scale": scale, "bench-startup": startup}


def figures(kind, text):
    """The panels for benchmark `kind` from markdown `text` (pure: no drawing)."""
    if kind not in KINDS:
        raise PlotError(f"unknown benchmark {kind!r}; one of {', '.join(KINDS)}")
    return KINDS[kind](tables(section(text, kind)))


# --- drawing -------------------------------------------------------------------

def draw(figs, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(figs), figsize=(6.4 * len(figs), 4.2), squeeze=False)
    for ax, f in zip(axes[0], figs):
        if f.categories is not None:
            draw_stacked(ax, f)
            continue
        for s in f.series:
            pts = sorted(zip(s.xs, s.ys))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=4, label=s.label)
        if f.hline is not None:
            ax.axhline(f.hline, color="grey", linewidth=0.8, linestyle="--")
        if f.xlog:
            ax.set_xscale("log", base=2)
        ticks = sorted({x for s in f.series for x in s.xs})
        ax.set_xticks(ticks, [size_text(x) if f.x_is_bytes else f"{x:g}" for x in ticks], fontsize=8)
        ax.minorticks_off()
        if f.ylog:
            ax.set_yscale("log")
        ax.set_title(f.title, fontsize=10)
        ax.set_xlabel(f.xlabel)
        ax.set_ylabel(f.ylabel)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7 if len(f.series) > 4 else 8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def draw_stacked(ax, f):
    bottoms = [0.0] * len(f.categories)
    for s in f.series:
        heights = [0.0] * len(f.categories)
        for x, y in zip(s.xs, s.ys):
            heights[x] = y
        ax.bar(range(len(f.categories)), heights, bottom=bottoms, label=s.label)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    ax.set_xticks(range(len(f.categories)), f.categories, fontsize=8)
    ax.set_title(f.title, fontsize=10)
    ax.set_ylabel(f.ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def main(argv):
    if len(argv) != 3:
        print("usage: plot_bench.py KIND SOURCE.md OUT.png (KIND: " + ", ".join(KINDS) + ")",
              file=sys.stderr)
        return 2
    kind, source, out = argv
    try:
        with open(source) as f:
            text = f.read()
        draw(figures(kind, text), out)
    except (OSError, PlotError) as e:
        print(f"plot_bench.py: {source}: {kind}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
