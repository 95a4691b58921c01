/* Lifetimes and threads (objects.h): handles destroyed in any order, and
 * one pool used from several threads at once. The thread test is also run
 * under ThreadSanitizer by tools/test (the build-tsan stage), where a race
 * on the pool's host-side state fails it even when the bytes happen to come
 * out right. */
#include "test_support.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define ROUNDS 25

/* Destroying the backend before its pool, and the pool before its batch,
 * leaves both usable until their last user is destroyed. */
static void test_destroy_in_any_order(void **state)
{
    (void)state;
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 4);
    rssm_error err;
    rssm_backend *b = NULL;
    rssm_pool *p = NULL;
    rssm_batch *batch = NULL;
    TS_OK(rssm_backend_create("cpu", &b, &err), &err);
    TS_OK(rssm_pool_create(b, &m, 4, RSSM_FLUSH_ALIGNED, &p, &err), &err);
    TS_OK(rssm_batch_create(p, 2, &batch, &err), &err);
    rh_rng r;
    rh_rng_seed(&r, 7, 0);
    uint32_t slot;
    TS_OK(rssm_pool_alloc(p, &slot, &err), &err);
    float *st = ts_random_state(&m, &r);
    TS_OK(rssm_pool_write_state(p, slot, st, &err), &err);
    rssm_backend_destroy(&b);
    assert_null(b);
    rssm_pool_destroy(&p);
    assert_null(p);

    /* The batch still steps its pool, whose device memory it still holds. */
    ts_inputs in;
    ts_inputs_alloc(&in, &m, 1);
    ts_inputs_random(&in, &r);
    float *out = malloc(ts_out_elems(&m, 1) * sizeof *out);
    for (uint64_t len = 1; len <= 6; len++)
        TS_OK(rssm_batch_step(batch, 1, &slot, &len, 0, &in.in, out, &err), &err);
    assert_int_equal(ts_count_nonfinite(out, RSSM_DTYPE_F32, ts_out_elems(&m, 1)), 0);
    free(st);
    rssm_batch_destroy(&batch);
    assert_null(batch);
    free(out);
    ts_inputs_free(&in);
}

/* A pool destroyed first, then its backend, then the batch; and a backend
 * destroyed while two pools use it. */
static void test_destroy_orders_all(void **state)
{
    (void)state;
    rssm_model m = ts_small_model(RSSM_GATE_KDA, 1, 2);
    rssm_error err;
    for (int order = 0; order < 6; order++) {
        rssm_backend *b = NULL;
        rssm_pool *p = NULL, *p2 = NULL;
        rssm_batch *batch = NULL;
        TS_OK(rssm_backend_create("cpu", &b, &err), &err);
        TS_OK(rssm_pool_create(b, &m, 2, RSSM_FLUSH_ALIGNED, &p, &err), &err);
        TS_OK(rssm_pool_create(b, &m, 2, RSSM_FLUSH_ALIGNED, &p2, &err), &err);
        TS_OK(rssm_batch_create(p, 1, &batch, &err), &err);
        uint32_t slot;
        TS_OK(rssm_pool_alloc(p2, &slot, &err), &err);
        static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
        for (int i = 0; i < 3; i++) {
            switch (orders[order][i]) {
            case 0: rssm_backend_destroy(&b); break;
            case 1: rssm_pool_destroy(&p); break;
            case 2: rssm_batch_destroy(&batch); break;
            }
            if (p2) { /* the other pool keeps working whatever went before */
                uint32_t wp = 99;
                TS_OK(rssm_pool_write_pos(p2, slot, &wp, &err), &err);
                assert_int_equal(wp, 0);
            }
        }
        rssm_pool_destroy(&p2);
    }
}

typedef struct worker {
    rssm_pool *pool;
    const rssm_model *m;
    uint32_t slot, other;
    float *mine;   /* the state this worker keeps writing to its slot */
    int failures;
} worker;

/* Each worker owns two slots and round-trips them through every host-side
 * pool operation; all of them share the pool's scratch and the backend. */
static void *work(void *arg)
{
    worker *w = arg;
    const size_t n = ts_state_elems(w->m);
    float *back = malloc(n * sizeof *back);
    void *blob = malloc(rssm_pool_export_size(w->pool));
    rssm_error err;
    for (int round = 0; round < ROUNDS && back && blob; round++) {
        if (rssm_pool_write_state(w->pool, w->slot, w->mine, &err) != RSSM_OK ||
            rssm_pool_read_state(w->pool, w->slot, back, &err) != RSSM_OK ||
            memcmp(back, w->mine, n * sizeof *back) != 0)
            w->failures++;
        if (rssm_pool_export(w->pool, w->slot, blob, rssm_pool_export_size(w->pool), &err) != RSSM_OK ||
            rssm_pool_import(w->pool, w->other, blob, rssm_pool_export_size(w->pool), &err) != RSSM_OK ||
            rssm_pool_materialise(w->pool, w->other, &err) != RSSM_OK ||
            rssm_pool_copy(w->pool, w->other, w->slot, &err) != RSSM_OK ||
            rssm_pool_read_state(w->pool, w->slot, back, &err) != RSSM_OK ||
            memcmp(back, w->mine, n * sizeof *back) != 0)
            w->failures++;
    }
    free(back);
    free(blob);
    return NULL;
}

static void test_one_pool_many_threads(void **state)
{
    (void)state;
    rssm_model m = ts_small_model(RSSM_GATE_GDN, 2, 4);
    m.state_dtype = RSSM_DTYPE_F32; /* round trips are exact */
    ts_env e;
    ts_env_open(&e, "cpu", &m, 2 * THREADS, RSSM_FLUSH_ALIGNED, 0);
    rh_rng r;
    rh_rng_seed(&r, 11, 0);
    ts_env_alloc_random(&e, 2 * THREADS, &r);
    worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.pool = e.pool, .m = &m, .slot = (uint32_t)i, .other = (uint32_t)(THREADS + i)};
        w[i].mine = ts_random_state(&m, &r);
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        failures += w[i].failures;
        free(w[i].mine);
    }
    assert_int_equal(failures, 0);
    ts_env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_destroy_in_any_order),
        cmocka_unit_test(test_destroy_orders_all),
        cmocka_unit_test(test_one_pool_many_threads),
    };
    return TS_RUN(tests);
}
