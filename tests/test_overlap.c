/* The overlap check of a call's tensors (common/overlap.h): exact on the
 * layouts engines use, a state and rings interleaved in one page per slot
 * among them, at any slot count, without walking the slots; a byte shared
 * by a written tensor and another is refused naming both, touching ranges
 * and tensors only read are not; a pattern too fine to settle in the
 * comparisons allowed is refused as such. */
#include "overlap.h"
#include "test_support.h"

#include <string.h>

/* `n0` blocks of `block` bytes `s0` apart, each of `n1` blocks `s1` apart. */
static rssm_named_extent t(const char *name, bool written, uint64_t space, uint64_t base, uint64_t block,
                           uint64_t s0, uint64_t n0, uint64_t s1, uint64_t n1)
{
    return (rssm_named_extent){name, {space, base, block, {s0, s1}, {n0, n1}}, written};
}

/* Whether the two tensors are refused as overlapping, checked in both
 * orders; a refusal names both. */
static bool refused(rssm_named_extent a, rssm_named_extent b)
{
    rssm_error err;
    const rssm_named_extent ab[2] = {a, b}, ba[2] = {b, a};
    const rssm_status st = rssm_check_overlaps(ab, 2, "test", &err);
    if (st != RSSM_OK) {
        assert_int_equal(st, RSSM_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(err.message, a.name));
        assert_non_null(strstr(err.message, b.name));
    }
    assert_int_equal(rssm_check_overlaps(ba, 2, "test", &err), st);
    return st != RSSM_OK;
}

enum { PAGE = 1000, SLOTS = 1 << 20 };

/* A pool of a million slots in pages of PAGE bytes: per slot 4 state heads
 * of 100 bytes at 0..400, 4 ring heads of 40 bytes 50 apart at `ring`. */
static rssm_named_extent state_at(uint64_t base) { return t("state", true, 0, base, 100, PAGE, SLOTS, 100, 4); }
static rssm_named_extent ring_at(uint64_t base) { return t("ring_d", true, 0, base, 40, PAGE, SLOTS, 50, 4); }

static void interleaved_pages(void **state)
{
    (void)state;
    assert_false(refused(state_at(0), ring_at(400)));     /* state and ring side by side in each page */
    assert_true(refused(state_at(0), ring_at(399)));      /* the ring's first byte on the state's last */
    assert_false(refused(state_at(0), ring_at(5 * PAGE + 400))); /* a ring starting 5 pages on */
    assert_true(refused(state_at(0), ring_at(5 * PAGE + 399)));
    assert_false(refused(state_at(7 * PAGE), ring_at(400))); /* a state starting 7 pages on */
    assert_true(refused(state_at(7 * PAGE), ring_at(7 * PAGE - 10))); /* a ring 10 bytes before it */
    /* a state after the ring's last page; one whose first page is the ring's last */
    assert_false(refused(state_at((uint64_t)SLOTS * PAGE), ring_at(400)));
    assert_true(refused(state_at((uint64_t)(SLOTS - 1) * PAGE), ring_at(300)));
    /* heads interleaved too: state heads 200 apart, the ring's between them */
    const rssm_named_extent heads = t("state", true, 0, 0, 100, PAGE, SLOTS, 200, 4);
    assert_false(refused(heads, t("ring_d", true, 0, 100, 100, PAGE, SLOTS, 200, 4)));
    assert_true(refused(heads, t("ring_d", true, 0, 99, 100, PAGE, SLOTS, 200, 4)));
}

static void rows_and_slots(void **state)
{
    (void)state;
    /* separate allocations, and ranges that only touch */
    assert_false(refused(state_at(0), t("out", true, 0, (uint64_t)SLOTS * PAGE, 64, 64, 8, 0, 1)));
    assert_false(refused(t("q", false, 0, 0, 100, 0, 1, 0, 1), t("out", true, 0, 100, 100, 0, 1, 0, 1)));
    assert_true(refused(t("q", false, 0, 0, 101, 0, 1, 0, 1), t("out", true, 0, 100, 100, 0, 1, 0, 1)));
    /* out as a view of one slot's checkpoint, far inside the pool */
    assert_true(refused(state_at(0), t("out", true, 0, 123456ull * PAGE + 100, 64, 64, 2, 0, 1)));
    /* rows in the pool's gaps (590..600 of each page) meet nothing */
    assert_false(refused(ring_at(400), t("out", true, 0, 590, 10, PAGE, 16, 0, 1)));
    assert_false(refused(ring_at(400), t("out", true, 0, 777 * PAGE + 590, 10, 0, 1, 0, 1)));
    assert_true(refused(ring_at(400), t("out", true, 0, 777 * PAGE + 589, 10, 0, 1, 0, 1)));
    /* rows that overlap one another (a read-only input may) */
    assert_false(refused(t("q", false, 0, 0, 300, 100, 10, 0, 1), t("out", true, 0, 1200, 100, 100, 10, 0, 1)));
    assert_true(refused(t("q", false, 0, 0, 300, 100, 10, 0, 1), t("out", true, 0, 1199, 100, 100, 10, 0, 1)));
}

static void what_is_refused(void **state)
{
    (void)state;
    /* tensors only read may share memory: q, k and v are one row's parts */
    assert_false(refused(t("q", false, 0, 0, 64, 256, 8, 0, 1), t("k", false, 0, 0, 256, 256, 8, 0, 1)));
    /* another buffer is another address space (Vulkan: offsets in a buffer) */
    assert_false(refused(t("state", true, 1, 0, 64, 0, 1, 0, 1), t("out", true, 2, 0, 64, 0, 1, 0, 1)));
    assert_true(refused(t("state", true, 1, 0, 64, 0, 1, 0, 1), t("out", true, 1, 32, 64, 0, 1, 0, 1)));
    /* sums past the address space saturate rather than wrap */
    const uint64_t high = (uint64_t)1 << 63;
    assert_false(refused(t("state", true, 0, high, 64, (uint64_t)1 << 42, 1u << 31, 1u << 20, 64),
                         t("out", true, 0, 4096, 64, 0, 1, 0, 1)));
    assert_true(refused(t("state", true, 0, high, 64, (uint64_t)1 << 42, 1u << 31, 1u << 20, 64),
                        t("out", true, 0, high + 8, 64, 0, 1, 0, 1)));
    /* of three, the first pair that meets is the one named */
    rssm_error err;
    const rssm_named_extent three[3] = {t("a", false, 0, 0, 10, 0, 1, 0, 1), t("b", true, 0, 100, 10, 0, 1, 0, 1),
                                        t("c", false, 0, 105, 10, 0, 1, 0, 1)};
    assert_int_equal(rssm_check_overlaps(three, 3, "layer run", &err), RSSM_ERR_INVALID_ARGUMENT);
    assert_string_equal(err.message, "layer run: b and c overlap: a tensor the call writes may share no byte with "
                                     "another of its tensors");
}

/* Even and odd bytes never meet, but only a walk over the blocks shows it:
 * refused as too fine to settle, not walked on every call. */
static void too_fine_to_settle(void **state)
{
    (void)state;
    rssm_error err;
    const rssm_named_extent x[2] = {t("state", true, 0, 0, 1, 2, 100000, 0, 1),
                                    t("out", true, 0, 1, 1, 4, 50000, 0, 1)};
    assert_int_equal(rssm_check_overlaps(x, 2, "test", &err), RSSM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "interleaved too finely"));
    /* a few of them are settled */
    const rssm_named_extent few[2] = {t("state", true, 0, 0, 1, 2, 100, 0, 1), t("out", true, 0, 1, 1, 4, 50, 0, 1)};
    TS_OK(rssm_check_overlaps(few, 2, "test", &err), &err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(interleaved_pages),
        cmocka_unit_test(rows_and_slots),
        cmocka_unit_test(what_is_refused),
        cmocka_unit_test(too_fine_to_settle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
