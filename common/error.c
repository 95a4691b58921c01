#include "error.h"

#include <stdarg.h>
#include <stdio.h>

const char *rssm_status_str(rssm_status status)
{
    switch (status) {
    case RSSM_OK: return "ok";
    case RSSM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case RSSM_ERR_UNSUPPORTED: return "unsupported";
    case RSSM_ERR_UNAVAILABLE: return "unavailable";
    case RSSM_ERR_OUT_OF_MEMORY: return "out of memory";
    case RSSM_ERR_POOL_FULL: return "pool full";
    case RSSM_ERR_BAD_SLOT: return "bad slot";
    case RSSM_ERR_FORMAT: return "bad format";
    case RSSM_ERR_IO: return "i/o error";
    case RSSM_ERR_DEVICE: return "device error";
    }
    return "unknown status";
}

rssm_status rssm_set_error(rssm_error *err, rssm_status status, const char *fmt, ...)
{
    if (err) {
        err->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

rssm_status rssm_clear_error(rssm_error *err)
{
    if (err) {
        err->status = RSSM_OK;
        err->message[0] = '\0';
    }
    return RSSM_OK;
}
