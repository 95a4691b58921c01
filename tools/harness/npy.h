/* Reading and writing numpy .npy files, so that traces can be produced and
 * checked with nothing more than numpy.save / numpy.load.
 *
 * Supported: format versions 1.0, 2.0 and 3.0 headers; little-endian dtypes
 * '<f4', '<f2', '<i4', '<i8', '<u4'; C order only; 0 to RH_NPY_MAX_DIMS
 * dimensions. Anything else (big-endian, Fortran order, other dtypes,
 * truncated data, a header that is not the dict numpy writes, a shape whose
 * byte size overflows) is rejected with RSSM_ERR_FORMAT and a message naming
 * the file and what was wrong. Nothing here aborts on bad input. */
#ifndef RH_NPY_H
#define RH_NPY_H

#include "rssm.h"

#include <stddef.h>
#include <stdint.h>

#define RH_NPY_MAX_DIMS 8

typedef enum rh_npy_dtype {
    RH_NPY_F4 = 0, /* '<f4' float32 */
    RH_NPY_F2,     /* '<f2' float16 */
    RH_NPY_I4,     /* '<i4' int32 */
    RH_NPY_I8,     /* '<i8' int64 */
    RH_NPY_U4,     /* '<u4' uint32 */
} rh_npy_dtype;

typedef struct rh_npy {
    rh_npy_dtype dtype;
    uint32_t ndim;
    uint64_t shape[RH_NPY_MAX_DIMS];
    size_t count; /* product of shape (1 for a 0-d array) */
    void *data;   /* count elements, owned; free with rh_npy_free */
} rh_npy;

/* '<f4' etc., and the element size in bytes. */
const char *rh_npy_dtype_descr(rh_npy_dtype t);
size_t rh_npy_dtype_size(rh_npy_dtype t);

/* Parses a whole .npy file held in memory. `name` is used in messages. */
rssm_status rh_npy_parse(const void *bytes, size_t size, const char *name, rh_npy *out,
                         rssm_error *err);

/* Reads `path`: RSSM_ERR_IO if it cannot be read, RSSM_ERR_FORMAT if it is
 * not a supported .npy file. */
rssm_status rh_npy_read(const char *path, rh_npy *out, rssm_error *err);

/* Writes `data` (count = product of shape) as a version 1.0 file (2.0 if the
 * header would not fit), header padded to 64 bytes as numpy does. */
rssm_status rh_npy_write(const char *path, rh_npy_dtype dtype, uint32_t ndim,
                         const uint64_t *shape, const void *data, rssm_error *err);

void rh_npy_free(rh_npy *a);

/* Formats a shape as "(2, 3, 4)" for messages. */
void rh_npy_shape_str(uint32_t ndim, const uint64_t *shape, char *buf, size_t size);

#endif
