/* Which code of a CUDA build a device runs (cuda/targets.h): plain C over
 * the build's target names and CUDA's answers. */
#include "targets.h"
#include "error.h" /* RSSM_PRINTF */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernels that need sm_90 are built with their Hopper parts only for
 * virtual architectures 9.0 and newer (RSSM_CUDA_SM90, kernel_common.cuh). */
enum { kHopper = 90 };

/* Parses one name of `len` characters ("sm_90a", "compute_80"). */
static bool parse_target(const char *s, size_t len, rssm_cuda_target *t)
{
    size_t at;
    if (len > 3 && strncmp(s, "sm_", 3) == 0)
        at = 3;
    else if (len > 8 && strncmp(s, "compute_", 8) == 0)
        at = 8;
    else
        return false;
    if (len >= sizeof t->name)
        return false;
    int arch = 0;
    size_t i = at;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
        arch = 10 * arch + (s[i] - '0');
    if (i == at || arch < 10 || arch > 9999)
        return false;
    t->suffix = 0;
    if (i < len && (s[i] == 'a' || s[i] == 'f'))
        t->suffix = s[i++];
    if (i != len)
        return false;
    memcpy(t->name, s, len);
    t->name[len] = '\0';
    t->arch = arch;
    t->ptx = at == 8;
    return true;
}

/* Calls fn on each name of `targets` that parses; stops when it returns false. */
static void each_target(const char *targets, bool (*fn)(const rssm_cuda_target *, void *), void *user)
{
    const char *s = targets ? targets : "";
    while (*s) {
        const size_t skip = strspn(s, " ;,");
        s += skip;
        const size_t len = strcspn(s, " ;,");
        rssm_cuda_target t;
        if (len > 0 && parse_target(s, len, &t) && !fn(&t, user))
            return;
        s += len;
    }
}

/* Whether target t runs on capability `dev` (10 * major + minor). */
static bool target_runs(const rssm_cuda_target *t, int dev)
{
    if (t->suffix == 'a')
        return dev == t->arch;
    if (!t->ptx || t->suffix == 'f') /* machine code, and family PTX: the same major, a later minor */
        return dev / 10 == t->arch / 10 && dev >= t->arch;
    return dev >= t->arch;
}

struct pick {
    int dev;
    bool found;
    rssm_cuda_target best;
};

static bool pick_one(const rssm_cuda_target *t, void *user)
{
    struct pick *p = user;
    if (!target_runs(t, p->dev))
        return true;
    /* machine code before PTX, then the newest */
    const bool better = !p->found || (p->best.ptx && !t->ptx) || (p->best.ptx == t->ptx && t->arch > p->best.arch);
    if (better) {
        p->best = *t;
        p->found = true;
    }
    return true;
}

bool rssm_cuda_target_for(const char *targets, int major, int minor, rssm_cuda_target *t)
{
    struct pick p = {10 * major + minor, false, {"", 0, false, 0}};
    each_target(targets, pick_one, &p);
    if (p.found)
        *t = p.best;
    return p.found;
}

struct text {
    char *buf;
    size_t size, len;
    int n;
};

static void text_add(struct text *x, const char *fmt, ...) RSSM_PRINTF(2, 3);
static void text_add(struct text *x, const char *fmt, ...)
{
    if (x->len >= x->size)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(x->buf + x->len, x->size - x->len, fmt, ap);
    va_end(ap);
    if (w > 0)
        x->len += (size_t)w;
    if (x->len >= x->size)
        x->len = x->size - 1;
}

static bool need_one(const rssm_cuda_target *t, void *user)
{
    struct text *x = user;
    const int major = t->arch / 10, minor = t->arch % 10;
    text_add(x, "%s%s%s: ", x->n++ ? "; " : "", t->name, t->ptx ? " PTX" : "");
    if (t->suffix == 'a')
        text_add(x, "%d.%d only", major, minor);
    else if (!t->ptx || t->suffix == 'f')
        text_add(x, "%d.%d and newer %d.x", major, minor, major);
    else
        text_add(x, "%d.%d and newer", major, minor);
    return true;
}

void rssm_cuda_targets_need(const char *targets, char *buf, size_t size)
{
    if (size == 0)
        return;
    struct text x = {buf, size, 0, 0};
    buf[0] = '\0';
    text_add(&x, "of a compute capability this build has code for (");
    each_target(targets, need_one, &x);
    if (x.n == 0)
        text_add(&x, "none");
    text_add(&x, ")");
}

/* `targets` as a list for messages: "sm_90a, compute_90". */
static bool list_one(const rssm_cuda_target *t, void *user)
{
    struct text *x = user;
    text_add(x, "%s%s", x->n++ ? ", " : "", t->name);
    return true;
}

static void list_targets(const char *targets, char *buf, size_t size)
{
    struct text x = {buf, size, 0, 0};
    buf[0] = '\0';
    each_target(targets, list_one, &x);
    if (x.n == 0)
        text_add(&x, "none");
}

void rssm_cuda_kernels_decide(const char *targets, int major, int minor, size_t smem_optin, size_t bulk_smem,
                              const rssm_cuda_code code[RSSM_CUDA_PARTS], rssm_cuda_kernels *k)
{
    memset(k, 0, sizeof *k);
    char list[160];
    list_targets(targets, list, sizeof list);
    const rssm_cuda_code pipe = code[RSSM_CUDA_PART_PIPELINE];
    rssm_cuda_target t;
    const bool predicted = rssm_cuda_target_for(targets, major, minor, &t);
    k->runs = pipe.ptx_version > 0;
    if (!k->runs) {
        snprintf(k->code, sizeof k->code, "no code");
        snprintf(k->why_not, sizeof k->why_not,
                 "CUDA loads none of this build's code on a GPU of compute capability %d.%d (the build's targets: "
                 "%s)", major, minor, list);
        return;
    }
    /* The target CUDA took, as the rules of rssm_cuda_target_for predict
     * it; where CUDA's answer differs (a driver's own choice), its answer. */
    if (predicted && t.arch == pipe.ptx_version)
        snprintf(k->code, sizeof k->code, "%s %s", t.name, t.ptx ? "PTX (JIT)" : "machine code");
    else
        snprintf(k->code, sizeof k->code, "compute_%d code (sm_%d machine code)", pipe.ptx_version,
                 pipe.binary_version);
    k->bulk = code[RSSM_CUDA_PART_BULK].ptx_version >= kHopper &&
              code[RSSM_CUDA_PART_WINDOW_BULK].ptx_version >= kHopper;
    k->pdl = code[RSSM_CUDA_PART_PIPELINE].ptx_version >= kHopper && code[RSSM_CUDA_PART_WINDOW].ptx_version >= kHopper;
    if (!k->bulk) {
        snprintf(k->why_not, sizeof k->why_not,
                 "the bulk kernel needs sm_90 code (bulk copies, mbarrier transaction counts), and this GPU "
                 "(compute capability %d.%d) runs this build's %s (the build's targets: %s)",
                 major, minor, k->code, list);
    } else if (smem_optin < bulk_smem) {
        k->bulk = false;
        snprintf(k->why_not, sizeof k->why_not,
                 "the bulk kernel needs %zu KiB of shared memory per block, and this GPU (compute capability "
                 "%d.%d) gives at most %zu KiB", (bulk_smem + 1023) / 1024, major, minor, smem_optin / 1024);
    }
}
