"""The machine's speed, so that the times of runs on different machines compare: `python3
ci/reference_loop.py` prints the seconds one core takes for PROGRAM, a fixed Python loop of 10^7 additions.

ci/test.sh prints it before anything else of a run starts, and the benchmarks keep it beside their times
(ci/bench/cityscapes_rehearsal.py). The loop runs at a module's top level, where every name is a global: in a
function, where names are locals, the same loop takes about a third of the time, and the figures no longer
compare. recipes/cityscapes-unet/benchmark_cache.py holds the same PROGRAM as text, since a recipe folder
stands alone.
"""
PROGRAM = """import time
started = time.perf_counter()
total = 0
for i in range(10 ** 7):
    total += i
print(f"{time.perf_counter() - started:.2f}")"""

if __name__ == "__main__":
    exec(PROGRAM)
