#define _POSIX_C_SOURCE 200809L
#include "timing.h"

#include <stdlib.h>
#include <time.h>

double rssm_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double rssm_median(double *v, size_t n)
{
    qsort(v, n, sizeof v[0], compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

rssm_timing rssm_timing_of(double *v, size_t n, uint32_t runs)
{
    const double median = rssm_median(v, n); /* sorts: v[0] is the fastest */
    return (rssm_timing){.median_seconds = median, .min_seconds = v[0], .runs = runs};
}

int rssm_warming_up(int warm, uint32_t runs, double started)
{
    if (runs == 0)
        return 1;
    return warm && runs < RSSM_WARMUP_MAX_RUNS && rssm_now_seconds() - started < RSSM_WARMUP_SECONDS;
}
