/* Small timing helpers shared by the backends' benchmark entries
 * (docs/design.md §7: a measurement is the median of several timed runs). */
#ifndef RSSM_TIMING_H
#define RSSM_TIMING_H

#include <stddef.h>

/* Seconds on a monotonic clock. */
double rssm_now_seconds(void);

/* The median of v[0..n-1], n >= 1; sorts v in place. */
double rssm_median(double *v, size_t n);

#endif
