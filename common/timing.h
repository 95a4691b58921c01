/* Small timing helpers shared by the backends' benchmark entries
 * (docs/design.md §7: a measurement is the median of several timed runs). */
#ifndef RSSM_TIMING_H
#define RSSM_TIMING_H

#include "rssm.h"

#include <stddef.h>
#include <stdint.h>

/* Seconds on a monotonic clock. */
double rssm_now_seconds(void);

/* The median of v[0..n-1], n >= 1; sorts v in place. */
double rssm_median(double *v, size_t n);

/* The median and the minimum of v[0..n-1], n >= 1, and `runs`; sorts v in
 * place. */
rssm_timing rssm_timing_of(double *v, size_t n, uint32_t runs);

/* How long a GPU backend runs a program untimed before timing it, so that
 * the clocks have ramped up (docs/bench.md): an idle H200 drops its SM
 * clock to 345 MHz within a second, and under load took up to 0.4 s to
 * reach 1980 MHz again (nvidia-smi at 200 ms); with 0.2 s, programs timed
 * after an idle gap (the first of each bench row) ran 2-3x slow. */
#define RSSM_WARMUP_SECONDS 0.6
/* The most untimed runs, for programs far shorter than that. */
#define RSSM_WARMUP_MAX_RUNS 10000

/* Whether a backend makes another untimed run after `runs` of them, the
 * first begun at `started` (rssm_now_seconds): always before the first;
 * then, when `warm`, until RSSM_WARMUP_SECONDS have passed or
 * RSSM_WARMUP_MAX_RUNS runs were made. */
int rssm_warming_up(int warm, uint32_t runs, double started);

#endif
