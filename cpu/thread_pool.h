/*
 * A small pthread pool that runs parallel-for loops: the CPU backend's way of
 * spreading the (row, value head) work items of a step over the cores.
 *
 * No global state: each pool belongs to whoever created it (the CPU backend
 * context). The calling thread takes part in every loop as worker 0, so a
 * pool of one thread starts no threads at all. Loops from different threads
 * on the same pool run one after the other.
 */
#ifndef RSSM_THREAD_POOL_H
#define RSSM_THREAD_POOL_H

#include "rssm.h"

#include <stddef.h>

typedef struct rssm_thread_pool rssm_thread_pool;

/* Called once per item; `worker` in [0, threads) names the thread, so the
 * callee can use per-worker scratch. Items run in no particular order. */
typedef void (*rssm_parallel_fn)(void *ctx, size_t item, unsigned worker);

/* `threads` >= 1 in total, the caller included. */
rssm_status rssm_thread_pool_create(unsigned threads, rssm_thread_pool **out, rssm_error *err);

/* Joins the workers and frees the pool; sets *pool to NULL. NULL is fine. */
void rssm_thread_pool_destroy(rssm_thread_pool **pool);

unsigned rssm_thread_pool_threads(const rssm_thread_pool *pool);

/* Runs fn(ctx, i, worker) for every i in [0, items) and returns when all
 * have finished. */
void rssm_thread_pool_for(rssm_thread_pool *pool, size_t items, rssm_parallel_fn fn, void *ctx);

#endif /* RSSM_THREAD_POOL_H */
