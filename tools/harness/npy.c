/* The .npy format: 6 magic bytes "\x93NUMPY", major and minor version bytes,
 * a little-endian header length (2 bytes in 1.0, 4 bytes in 2.0 and 3.0),
 * then an ASCII Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw array data. The parser
 * below accepts that dict in any key order and spacing, and nothing else. */
#include "npy.h"

#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

const char *rh_npy_dtype_descr(rh_npy_dtype t)
{
    switch (t) {
    case RH_NPY_F4: return "<f4";
    case RH_NPY_F2: return "<f2";
    case RH_NPY_I4: return "<i4";
    case RH_NPY_I8: return "<i8";
    case RH_NPY_U4: return "<u4";
    }
    return "?";
}

size_t rh_npy_dtype_size(rh_npy_dtype t)
{
    switch (t) {
    case RH_NPY_F2: return 2;
    case RH_NPY_I8: return 8;
    default: return 4;
    }
}

void rh_npy_shape_str(uint32_t ndim, const uint64_t *shape, char *buf, size_t size)
{
    size_t at = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    at += (size_t)snprintf(buf + at, size - at, "(");
    for (uint32_t i = 0; i < ndim && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, i ? ", %llu" : "%llu", (unsigned long long)shape[i]);
    if (at < size)
        snprintf(buf + at, size - at, ndim == 1 ? ",)" : ")");
}

/* ---------------------------------------------------------------- parsing */

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_space(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int eat(cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string (single or double quotes, no escapes: numpy never writes
 * them in these fields). */
static int parse_str(cursor *c, char *out, size_t size)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= size)
            return 0;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return 0;
    c->p++;
    out[n] = '\0';
    return 1;
}

static int parse_word(cursor *c, const char *w)
{
    skip_space(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* A non-negative decimal that fits in 63 bits. */
static int parse_uint(cursor *c, uint64_t *v)
{
    skip_space(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return 0;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        uint64_t d = (uint64_t)(*c->p - '0');
        if (x > (UINT64_C(0x7fffffffffffffff) - d) / 10)
            return 0;
        x = x * 10 + d;
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L') /* Python 2 longs */
        c->p++;
    *v = x;
    return 1;
}

static rssm_status parse_header(const char *h, size_t len, const char *name, rh_npy *out,
                                rssm_error *err)
{
    cursor c = {h, h + len};
    int have_descr = 0, have_order = 0, have_shape = 0;
    char descr[32] = {0};
    if (!eat(&c, '{'))
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: header is not a dict", name);
    while (!eat(&c, '}')) {
        char key[32];
        if (!parse_str(&c, key, sizeof key) || !eat(&c, ':'))
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: malformed header dict", name);
        if (strcmp(key, "descr") == 0) {
            if (!parse_str(&c, descr, sizeof descr))
                return rssm_set_error(err, RSSM_ERR_FORMAT,
                                      "%s: 'descr' is not a simple dtype string (structured arrays are not supported)",
                                      name);
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_word(&c, "False"))
                have_order = 1;
            else if (parse_word(&c, "True"))
                return rssm_set_error(err, RSSM_ERR_FORMAT,
                                      "%s: Fortran-order arrays are not supported; save with "
                                      "numpy.ascontiguousarray", name);
            else
                return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: 'fortran_order' is not True/False", name);
        } else if (strcmp(key, "shape") == 0) {
            if (!eat(&c, '('))
                return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: 'shape' is not a tuple", name);
            out->ndim = 0;
            while (!eat(&c, ')')) {
                uint64_t d;
                if (out->ndim == RH_NPY_MAX_DIMS)
                    return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: more than %d dimensions", name,
                                          RH_NPY_MAX_DIMS);
                if (!parse_uint(&c, &d))
                    return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: malformed 'shape'", name);
                out->shape[out->ndim++] = d;
                if (!eat(&c, ',')) {
                    if (!eat(&c, ')'))
                        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: malformed 'shape'", name);
                    break;
                }
            }
            have_shape = 1;
        } else {
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: unexpected header key '%s'", name, key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}'))
                return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: malformed header dict", name);
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: header lacks '%s'", name,
                              !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    static const rh_npy_dtype all[] = {RH_NPY_F4, RH_NPY_F2, RH_NPY_I4, RH_NPY_I8, RH_NPY_U4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(descr, rh_npy_dtype_descr(all[i])) == 0) {
            out->dtype = all[i];
            return RSSM_OK;
        }
    }
    return rssm_set_error(err, RSSM_ERR_FORMAT,
                          "%s: dtype '%s' is not supported (use little-endian <f4, <f2, <i4, <i8 or <u4)",
                          name, descr);
}

rssm_status rh_npy_parse(const void *bytes, size_t size, const char *name, rh_npy *out,
                         rssm_error *err)
{
    const unsigned char *b = bytes;
    if (!out || (!bytes && size))
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "npy: NULL argument");
    memset(out, 0, sizeof *out);
    if (!name)
        name = "npy";
    if (size < 10 || memcmp(b, magic, sizeof magic) != 0)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: not a .npy file (bad magic)", name);
    unsigned major = b[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: truncated header", name);
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hstart = 12;
    } else {
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: unsupported .npy version %u.%u", name, major, b[7]);
    }
    if (hlen > size - hstart)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: truncated header (%zu bytes announced, %zu present)",
                              name, hlen, size - hstart);
    rssm_status st = parse_header((const char *)b + hstart, hlen, name, out, err);
    if (st != RSSM_OK)
        return st;
    size_t count = 1, esize = rh_npy_dtype_size(out->dtype);
    for (uint32_t i = 0; i < out->ndim; i++) {
        uint64_t d = out->shape[i];
        if (d != 0 && count > SIZE_MAX / esize / d) {
            char s[160];
            rh_npy_shape_str(out->ndim, out->shape, s, sizeof s);
            return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: shape %s is too large", name, s);
        }
        count *= (size_t)d;
    }
    size_t have = size - hstart - hlen, want = count * esize;
    if (have != want) {
        char s[160];
        rh_npy_shape_str(out->ndim, out->shape, s, sizeof s);
        return rssm_set_error(err, RSSM_ERR_FORMAT, "%s: %s data of shape %s needs %zu bytes, the file has %zu",
                              name, rh_npy_dtype_descr(out->dtype), s, want, have);
    }
    out->count = count;
    out->data = malloc(want ? want : 1);
    if (!out->data)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", name, want);
    if (want)
        memcpy(out->data, b + hstart + hlen, want);
    return rssm_clear_error(err);
}

rssm_status rh_npy_read(const char *path, rh_npy *out, rssm_error *err)
{
    if (!path || !out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "npy: NULL argument");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return rssm_set_error(err, RSSM_ERR_IO, "%s: %s", path, strerror(errno));
    /* a directory opens for reading on Linux, and its "size" is LONG_MAX */
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return rssm_set_error(err, RSSM_ERR_IO, "%s: not a regular file (a .npy file is expected here)", path);
    }
    rssm_status st = RSSM_OK;
    unsigned char *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = rssm_set_error(err, RSSM_ERR_IO, "%s: cannot determine the file size", path);
    } else if (!(buf = malloc((size_t)size + 1))) {
        st = rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "%s: cannot allocate %ld bytes", path, size);
    } else if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        st = rssm_set_error(err, RSSM_ERR_IO, "%s: read failed", path);
    } else {
        st = rh_npy_parse(buf, (size_t)size, path, out, err);
    }
    free(buf);
    fclose(f);
    return st;
}

/* ---------------------------------------------------------------- writing */

rssm_status rh_npy_write(const char *path, rh_npy_dtype dtype, uint32_t ndim,
                         const uint64_t *shape, const void *data, rssm_error *err)
{
    if (!path || ndim > RH_NPY_MAX_DIMS || (ndim && !shape))
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "npy: bad arguments for %s",
                              path ? path : "(null)");
    char dict[512], s[200];
    rh_npy_shape_str(ndim, shape, s, sizeof s);
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     rh_npy_dtype_descr(dtype), s);
    if (n < 0 || (size_t)n >= sizeof dict)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "%s: header too long", path);
    size_t count = 1;
    for (uint32_t i = 0; i < ndim; i++)
        count *= (size_t)shape[i];
    /* magic + version + length, dict, spaces, '\n'; total a multiple of 64. */
    int v2 = (size_t)n + 1 + 10 > 65535;
    size_t pre = v2 ? 12 : 10;
    size_t total = (pre + (size_t)n + 1 + 63) / 64 * 64;
    size_t hlen = total - pre;
    unsigned char head[640];
    memcpy(head, magic, 6);
    head[6] = v2 ? 2 : 1;
    head[7] = 0;
    head[8] = (unsigned char)(hlen & 0xff);
    head[9] = (unsigned char)(hlen >> 8 & 0xff);
    if (v2) {
        head[10] = (unsigned char)(hlen >> 16 & 0xff);
        head[11] = (unsigned char)(hlen >> 24 & 0xff);
    }
    memcpy(head + pre, dict, (size_t)n);
    memset(head + pre + n, ' ', hlen - (size_t)n - 1);
    head[total - 1] = '\n';

    FILE *f = fopen(path, "wb");
    if (!f)
        return rssm_set_error(err, RSSM_ERR_IO, "%s: %s", path, strerror(errno));
    size_t bytes = count * rh_npy_dtype_size(dtype);
    int ok = fwrite(head, 1, total, f) == total && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        return rssm_set_error(err, RSSM_ERR_IO, "%s: write failed", path);
    return rssm_clear_error(err);
}

void rh_npy_free(rh_npy *a)
{
    if (a) {
        free(a->data);
        memset(a, 0, sizeof *a);
    }
}
