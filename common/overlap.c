/* Exact overlap of two block lattices (overlap.h). Two lattices whose
 * bounding ranges are apart are disjoint; otherwise the one with the
 * longer range is split along its outer dimension into the parts that
 * reach the other's range, and each part is compared again. Two lattices
 * with the same outer stride (a state and a ring sharing each slot's page)
 * are compared part 0 against the other's parts at the few shifts where
 * their ranges meet, which holds for every pair of parts at that shift:
 * the comparison costs the same whatever the slot count. Sums and products
 * saturate: a lattice that reaches past the address space is taken to
 * reach its end, which can only make more of them meet. */
#include "overlap.h"
#include "error.h"

typedef enum meet_result {
    DISJOINT = 0,
    MEET,      /* a byte of one is a byte of the other */
    UNDECIDED, /* interleaved too finely to settle within the budget */
} meet_result;

/* Comparisons one pair may take: the layouts engines use take a few dozen;
 * one that needs more is refused rather than walked block by block on
 * every call. */
#define MEET_BUDGET 4096u

/* Dimensions outer first, only those longer than one block. */
typedef struct lattice {
    uint64_t base, block;
    unsigned dims;
    uint64_t stride[2], count[2];
} lattice;

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
#if defined(__GNUC__)
    uint64_t p;
    return __builtin_mul_overflow(a, b, &p) ? UINT64_MAX : p; /* no division on every call */
#else
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
#endif
}

static lattice lattice_of(const rssm_extent *e)
{
    lattice x = {.base = e->base, .block = e->block};
    for (int d = 0; d < 2; d++)
        if (e->count[d] > 1 && e->stride[d] > 0) {
            x.stride[x.dims] = e->stride[d];
            x.count[x.dims] = e->count[d];
            x.dims++;
        }
    if (x.dims == 2 && x.stride[1] > x.stride[0]) {
        const uint64_t s = x.stride[0], n = x.count[0];
        x.stride[0] = x.stride[1];
        x.count[0] = x.count[1];
        x.stride[1] = s;
        x.count[1] = n;
    }
    return x;
}

/* Bytes from the first byte of the lattice (dimensions from `from` on) to
 * just past its last. */
static uint64_t span(const lattice *x, unsigned from)
{
    uint64_t s = x->block;
    for (unsigned d = from; d < x->dims; d++)
        s = add_sat(s, mul_sat(x->count[d] - 1, x->stride[d]));
    return s;
}

/* Part i of the outer dimension: a lattice one dimension short. */
static lattice part(const lattice *x, uint64_t i)
{
    lattice p = {.base = add_sat(x->base, mul_sat(i, x->stride[0])), .block = x->block, .dims = x->dims - 1};
    p.stride[0] = x->stride[1];
    p.count[0] = x->count[1];
    return p;
}

static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

static meet_result meet(const lattice *a, const lattice *b, uint32_t *budget);

/* a and b with one outer stride S: part i of a meets part i + k of b as
 * part 0 of a meets part k of b (both shifted by i S), so only the shifts
 * k at which their ranges meet need a look. Offsets from 2^62 up are left
 * to the general split (-1), whose arithmetic is unsigned. */
static int meet_same_stride(const lattice *a, const lattice *b, uint32_t *budget)
{
    const uint64_t big = (uint64_t)1 << 62, S = a->stride[0];
    const uint64_t fa = span(a, 1), fb = span(b, 1);
    if (a->base >= big || b->base >= big || fa >= big || fb >= big || S >= big)
        return -1;
    const int64_t d = (int64_t)b->base - (int64_t)a->base, s = (int64_t)S;
    /* part k of b starts d + k S from part 0 of a: they meet only for
     * -fb < d + k S < fa */
    int64_t lo = floor_div(-(int64_t)fb - d, s) + 1, hi = -floor_div(d - (int64_t)fa, s) - 1;
    if (lo < -(int64_t)(a->count[0] - 1))
        lo = -(int64_t)(a->count[0] - 1);
    if (hi > (int64_t)(b->count[0] - 1))
        hi = (int64_t)(b->count[0] - 1);
    for (int64_t k = lo; k <= hi; k++) {
        const lattice pa = part(a, k < 0 ? (uint64_t)-k : 0), pb = part(b, k > 0 ? (uint64_t)k : 0);
        const meet_result m = meet(&pa, &pb, budget);
        if (m != DISJOINT)
            return (int)m;
    }
    return DISJOINT;
}

static meet_result meet(const lattice *a, const lattice *b, uint32_t *budget)
{
    if (*budget == 0)
        return UNDECIDED;
    --*budget;
    const uint64_t fa = span(a, 0), fb = span(b, 0);
    if (a->base >= add_sat(b->base, fb) || b->base >= add_sat(a->base, fa))
        return DISJOINT;
    if (a->dims == 0 && b->dims == 0)
        return MEET;
    if (a->dims > 0 && b->dims > 0 && a->stride[0] == b->stride[0]) {
        const int m = meet_same_stride(a, b, budget);
        if (m >= 0)
            return (meet_result)m;
    }
    /* Split the one with the longer range: the parts i of `x` that reach
     * the range [lo, hi) of `y` have x->base + i s < hi and
     * x->base + i s + f > lo. */
    const bool split_a = a->dims > 0 && (b->dims == 0 || fa >= fb);
    const lattice *x = split_a ? a : b, *y = split_a ? b : a;
    const uint64_t s = x->stride[0], f = span(x, 1), lo = y->base, hi = add_sat(y->base, split_a ? fb : fa);
    uint64_t first = 0, last = (hi - x->base - 1) / s; /* hi > x->base: the ranges meet */
    if (last > x->count[0] - 1)
        last = x->count[0] - 1;
    if (lo >= add_sat(x->base, f))
        first = (lo - x->base - f) / s + 1;
    for (uint64_t i = first; i <= last; i++) {
        const lattice p = part(x, i);
        const meet_result m = meet(&p, y, budget);
        if (m != DISJOINT)
            return m;
    }
    return DISJOINT;
}

/* Just past the last byte of e. */
static uint64_t extent_end(const rssm_extent *e)
{
    uint64_t s = add_sat(e->base, e->block);
    for (int d = 0; d < 2; d++)
        if (e->count[d] > 1)
            s = add_sat(s, mul_sat(e->count[d] - 1, e->stride[d]));
    return s;
}

rssm_status rssm_check_overlaps(const rssm_named_extent *t, size_t n, const char *who, rssm_error *err)
{
    /* Each tensor's range once: most pairs are apart by their ranges, a
     * comparison each, and only the others are compared block by block. */
    uint64_t end[RSSM_OVERLAP_MAX_TENSORS];
    if (n > RSSM_OVERLAP_MAX_TENSORS)
        n = RSSM_OVERLAP_MAX_TENSORS;
    for (size_t i = 0; i < n; i++)
        end[i] = extent_end(&t[i].bytes);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            const rssm_extent *a = &t[i].bytes, *b = &t[j].bytes;
            if ((!t[i].written && !t[j].written) || a->space != b->space || a->base >= end[j] || b->base >= end[i])
                continue;
            const lattice x = lattice_of(a), y = lattice_of(b);
            uint32_t budget = MEET_BUDGET;
            const meet_result m = meet(&x, &y, &budget);
            if (m == MEET)
                return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                      "%s: %s and %s overlap: a tensor the call writes may share no byte with "
                                      "another of its tensors",
                                      who, t[i].name, t[j].name);
            if (m == UNDECIDED)
                return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT,
                                      "%s: %s and %s are interleaved too finely to be shown apart in %u "
                                      "comparisons; a tensor the call writes may share no byte with another",
                                      who, t[i].name, t[j].name, MEET_BUDGET);
        }
    return rssm_clear_error(err);
}
