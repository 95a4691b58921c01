/* How much state `rssm bench` touches per step when --state-mib is not
 * given on the cpu backend (docs/bench.md, "What is swept"): four times the
 * last-level cache the CPU reports, at least 64 MiB, so that the state is
 * not cache-resident between visits; in --quick no more than the run's
 * steps can move within a time budget at the copy bandwidth measured first,
 * so that `tools/run` stays within its time whatever cache size a machine
 * reports; never more than a quarter of the machine's memory. Plain
 * arithmetic, apart from the measuring, so that the tests can hold it to
 * made-up machines. */
#ifndef RH_BENCH_SIZE_H
#define RH_BENCH_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* The floor of the size: what the cpu backend used before it read the
 * cache, and what a quick run keeps however slow the machine. */
#define RH_BENCH_MIN_STATE_MIB 64u

/* The time budget of a quick run's cpu table, seconds (docs/bench.md). */
#define RH_BENCH_QUICK_BUDGET_S 90.0

/* What one timed step costs on the cpu backend, setup and checks included,
 * in copies of its state (read + write) at the copy bandwidth measured
 * first: 1.5 to 2.1 on the project's 2-core VM (docs/bench.md, "What is
 * swept"; less where other work held the memory bandwidth down while it
 * was measured), where the kernels' arithmetic adds to the stream instead
 * of overlapping it (bench/results/local/notes.md). The larger, and some
 * room, so that the estimate errs on the long side. */
#define RH_BENCH_CPU_STEP_COPIES 2.2

typedef enum rh_state_bound {
    RH_STATE_WANTED = 0, /* four times the cache (or the floor) */
    RH_STATE_BUDGET,     /* less: the time budget */
    RH_STATE_MEMORY,     /* less: a quarter of the machine's memory */
} rh_state_bound;

typedef struct rh_state_size {
    uint32_t mib;        /* the state to touch per step */
    uint32_t wanted_mib; /* four times the cache, at least the floor */
    uint32_t llc_mib;    /* the cache reported, rounded up; 0: none reported */
    rh_state_bound bound;
    int within_llc;      /* mib <= llc_mib: the state cannot exceed the cache */
    double estimated_s;  /* the timed steps at `mib` (0 when no estimate was asked for) */
} rh_state_size;

/* The size for a machine that reports `llc_bytes` of last-level cache (0:
 * none) and `mem_bytes` of memory (0: unknown). With `budget_s` > 0 and
 * `copy_bps` > 0 (bytes read + written per second), the size is also no
 * more than `steps` steps can touch within the budget, at
 * RH_BENCH_CPU_STEP_COPIES copies of the state each, but not below the
 * floor; `estimated_s` is then what those steps take at the size chosen. */
rh_state_size rh_bench_state_size(size_t llc_bytes, size_t mem_bytes, double copy_bps, double steps,
                                  double budget_s);

/* The timed steps of `rssm bench`'s first table (bench_programs.c, bench_time_model):
 * per (gate, state, batch) configuration, the packed program of max(L)
 * steps and its in-place pass, and per ring length and positions (0
 * uniform, 1 staggered) the replay cycle of L steps, with the three
 * per-position programs of L steps where the rows are uniform (L >= 2);
 * each program run once untimed and then `cycles` times. */
double rh_bench_timed_steps(size_t configs, uint32_t cycles, const uint32_t *ring_len, size_t nring,
                            const int *positions, size_t npos);

/* The seconds `steps` steps over `mib` MiB of state take at `copy_bps`, by
 * the same rule. */
double rh_bench_estimate_s(uint32_t mib, double copy_bps, double steps);

#endif
