/* Filling an rssm_error: the one way every function in the library reports
 * what went wrong. */
#ifndef RSSM_ERROR_H
#define RSSM_ERROR_H

#include "rssm.h"

#if defined(__GNUC__)
#define RSSM_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define RSSM_PRINTF(fmt, args)
#endif

/* Sets err (if not NULL) to `status` and the formatted message, and returns
 * `status`, so a failure path reads `return rssm_set_error(err, ..., ...)`. */
rssm_status rssm_set_error(rssm_error *err, rssm_status status, const char *fmt, ...)
    RSSM_PRINTF(3, 4);

/* Marks err as success (status RSSM_OK, empty message); returns RSSM_OK. */
rssm_status rssm_clear_error(rssm_error *err);

#endif
