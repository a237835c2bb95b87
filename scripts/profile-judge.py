#!/usr/bin/env python3
"""Groups a flat `perf report --sort dso,sym` (scripts/profile-judge) by what the code
does and prints a table: share of the samples and CPU milliseconds per judgment.

    profile-judge.py REPORT.txt JUDGMENTS SECONDS FREQUENCY
"""
import re
import sys

# First match wins; symbols are Rust paths or C names, the dso is the file perf saw.
GROUPS = [
    ("attention (mistral.rs CPU attention)", r"attention::"),
    ("quantized matmul (candle k-quant vec_dot)", r"k_quants|quantized::|from_float|QMatMul"),
    ("dense matmul (gemm f32 kernels)", r"gemm"),
    ("thread pool wait (rayon, futex, yield)", r"rayon|crossbeam|sched_yield|futex|parking_lot|std::thread|__lll|pthread_cond"),
    ("memory copy and fill", r"memcpy|memmove|memset|copy_strided|copy2d|slice_set|clone_in_cache|clone_out_cache"),
    ("allocation and page faults", r"malloc|_int_free|\bfree\b|cfree|calloc|realloc|clear_page|page_fault|do_anonymous|alloc_pages|mmap|munmap|madvise|_raw_spin|lru_|folio|zap_|tlb"),
    ("softmax, norms, rope and other element-wise ops", r"softmax|exp|rms|rope|silu|unary|binary|affine|reduce|cpu_backend|candle_core|candle_nn|mistralrs_quant"),
    ("tokenizer and chat template", r"tokenizers|minijinja|onig|regex|fancy_regex|unicode"),
    ("mistral.rs engine and jury", r"mistralrs|jury|tokio"),
]


def main():
    report, judgments, secs, freq = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    samples = None
    rows = []
    for line in open(report):
        m = re.match(r"# Samples: (\d+)([KM]?)", line)
        if m:
            samples = int(m.group(1)) * {"": 1, "K": 1000, "M": 1_000_000}[m.group(2)]
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)$", line)
        if m:
            rows.append((float(m.group(1)), m.group(2), m.group(3), m.group(4)))
    if not rows or not samples or judgments <= 0:
        sys.exit(f"error: {report}: no samples or no judgments in the window")
    totals = {name: 0.0 for name, _ in GROUPS}
    totals["kernel, other"] = 0.0
    totals["other"] = 0.0
    for pct, dso, kind, sym in rows:
        for name, pattern in GROUPS:
            if re.search(pattern, sym, re.IGNORECASE):
                totals[name] += pct
                break
        else:
            totals["kernel, other" if kind == "k" else "other"] += pct
    cpu_s = samples / freq
    print(f"{judgments} judgments in {secs:.0f} s: {1000 * secs / judgments:.0f} ms each (wall clock); "
          f"{samples} samples, {1000 * cpu_s / judgments:.0f} CPU ms per judgment")
    print("\n| where | share of samples | CPU ms per judgment |")
    print("|---|---|---|")
    for name, pct in sorted(totals.items(), key=lambda kv: -kv[1]):
        if pct >= 0.05:
            print(f"| {name} | {pct:.1f}% | {pct / 100 * 1000 * cpu_s / judgments:.0f} |")
    print("\nTop symbols:")
    for pct, dso, kind, sym in sorted(rows, reverse=True)[:15]:
        print(f"  {pct:5.1f}%  {dso:<16} {sym[:110]}")


if __name__ == "__main__":
    main()
