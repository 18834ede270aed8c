"""Print the CPU kernel sets (ISAs) this machine can run, one ``ATEN:ONEDNN`` pair a line.

scripts/test.sh runs the float-tolerance tests once under each pair, so that a tolerance fitted to
one machine's kernels fails here and not on a user's CPU. ``default:SSE41`` (no vector kernels)
runs everywhere; ``avx2:AVX2`` where the CPU has AVX2 and FMA; ``avx512:AVX512_CORE`` where it has
the AVX-512 subsets torch's AVX-512 kernels use (F, BW, VL, DQ). torch reads ATEN_CPU_CAPABILITY,
oneDNN reads ONEDNN_MAX_CPU_ISA; neither can go above what the CPU has.
"""
from pathlib import Path


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def isa_legs(flags: set[str]) -> list[str]:
    legs = ["default:SSE41"]
    if {"avx2", "fma"} <= flags:
        legs.append("avx2:AVX2")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        legs.append("avx512:AVX512_CORE")
    return legs


if __name__ == "__main__":
    print("\n".join(isa_legs(cpu_flags())))
