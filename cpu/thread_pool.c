/* The CPU backend's parallel-for (see thread_pool.h). Workers sleep on a
 * condition variable between loops and take items one at a time from a
 * shared atomic counter: items are whole (row, head) steps of several
 * microseconds, so the counter costs nothing and uneven items (flush or
 * not, ring positions) still balance. */
#include "thread_pool.h"
#include "error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct worker_arg {
    rssm_thread_pool *pool;
    unsigned index;
} worker_arg;

struct rssm_thread_pool {
    unsigned threads;          /* the caller included */
    unsigned started;          /* worker threads running (threads - 1 once created) */
    pthread_t *workers;
    worker_arg *args;

    pthread_mutex_t run_lock;  /* one loop at a time */
    pthread_mutex_t lock;      /* guards everything below except `next` */
    pthread_cond_t wake;       /* a new loop, or stop */
    pthread_cond_t done;       /* the last worker left the loop */
    uint64_t generation;       /* counts loops; workers wait for it to change */
    int stop;
    unsigned busy;             /* workers still inside the current loop */

    rssm_parallel_fn fn;
    void *ctx;
    size_t items;
    atomic_size_t next;        /* next item to hand out */
};

static void drain(rssm_thread_pool *p, rssm_parallel_fn fn, void *ctx, size_t items, unsigned worker)
{
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= items)
            return;
        fn(ctx, i, worker);
    }
}

static void *worker_main(void *arg)
{
    const worker_arg *a = arg;
    rssm_thread_pool *p = a->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        rssm_parallel_fn fn = p->fn;
        void *ctx = p->ctx;
        size_t items = p->items;
        pthread_mutex_unlock(&p->lock);
        drain(p, fn, ctx, items, a->index);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void stop_workers(rssm_thread_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->workers[i], NULL);
    p->started = 0;
}

static void free_pool(rssm_thread_pool *p)
{
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    free(p->args);
    free(p->workers);
    free(p);
}

rssm_status rssm_thread_pool_create(unsigned threads, rssm_thread_pool **out, rssm_error *err)
{
    if (!out)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "thread pool: out must not be NULL");
    *out = NULL;
    if (threads == 0)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "thread pool: threads must be >= 1");
    rssm_thread_pool *p = calloc(1, sizeof *p);
    if (!p)
        return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY, "thread pool: out of host memory");
    p->threads = threads;
    atomic_init(&p->next, 0);
    if (threads > 1) {
        p->workers = calloc(threads - 1, sizeof *p->workers);
        p->args = calloc(threads - 1, sizeof *p->args);
        if (!p->workers || !p->args) {
            free(p->args);
            free(p->workers);
            free(p);
            return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY,
                                  "thread pool: out of host memory for %u threads", threads);
        }
    }
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    for (unsigned i = 0; i + 1 < threads; i++) {
        p->args[i].pool = p;
        p->args[i].index = i + 1;
        int rc = pthread_create(&p->workers[i], NULL, worker_main, &p->args[i]);
        if (rc != 0) {
            stop_workers(p);
            free_pool(p);
            return rssm_set_error(err, RSSM_ERR_OUT_OF_MEMORY,
                                  "thread pool: could not start worker thread %u of %u: %s", i + 1,
                                  threads - 1, strerror(rc));
        }
        p->started = i + 1;
    }
    *out = p;
    return rssm_clear_error(err);
}

void rssm_thread_pool_destroy(rssm_thread_pool **pool)
{
    if (!pool || !*pool)
        return;
    stop_workers(*pool);
    free_pool(*pool);
    *pool = NULL;
}

unsigned rssm_thread_pool_threads(const rssm_thread_pool *pool) { return pool->threads; }

void rssm_thread_pool_for(rssm_thread_pool *p, size_t items, rssm_parallel_fn fn, void *ctx)
{
    if (items == 0)
        return;
    /* Held for the whole loop: worker indices (and so per-worker scratch)
     * are only unique within one loop. */
    pthread_mutex_lock(&p->run_lock);
    if (p->started == 0 || items == 1) {
        for (size_t i = 0; i < items; i++)
            fn(ctx, i, 0);
        pthread_mutex_unlock(&p->run_lock);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->items = items;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    drain(p, fn, ctx, items, 0);

    pthread_mutex_lock(&p->lock);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->run_lock);
}
