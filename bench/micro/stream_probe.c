/* How fast two threads stream a state pool on this machine, outside the
 * library: the measurements behind RSSM_CPU_PREFETCH_AHEAD (cpu/cpu_kernels.h)
 * and bench/results/local/notes.md. Needs AVX-512F.
 *
 *   gcc -O3 -march=native bench/micro/stream_probe.c -o /tmp/stream_probe -lpthread
 *   /tmp/stream_probe 1920          # MiB; prints one line per pass
 *
 * Passes over the same buffer (2 MiB huge pages where the kernel gives them),
 * each split between two threads, median of 7 after one untimed:
 *   read       sum of every float
 *   dot        each 128-float row against two vectors, as the kernels' sums
 *              pass (dot2_block_k128) does
 *   dot+N      the same, requesting the row N bytes ahead first
 *   in-place   every float read and written back
 *   in-place+1024  the same, requesting 1 KiB ahead */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

typedef struct job {
    float *p;
    size_t n; /* floats, a multiple of 128 */
    int kind;
    size_t ahead;
    float sink;
} job;

enum { READ, DOT, INPLACE };

static float xs[128], ys[128];

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void request(const float *row, size_t ahead)
{
    for (size_t l = 0; ahead && l < 512; l += 64)
        _mm_prefetch((const char *)row + ahead + l, _MM_HINT_T0);
}

static void *pass(void *arg)
{
    job *a = arg;
    __m512 acc = _mm512_setzero_ps();
    __m512 xr[8], yr[8];
    for (int i = 0; i < 8; i++) {
        xr[i] = _mm512_loadu_ps(xs + 16 * i);
        yr[i] = _mm512_loadu_ps(ys + 16 * i);
    }
    for (size_t row = 0; row < a->n / 128; row++) {
        float *r = a->p + row * 128;
        request(r, a->ahead);
        if (a->kind == READ) {
            for (int i = 0; i < 8; i++)
                acc = _mm512_add_ps(acc, _mm512_loadu_ps(r + 16 * i));
        } else if (a->kind == INPLACE) {
            for (int i = 0; i < 8; i++)
                _mm512_storeu_ps(r + 16 * i, _mm512_add_ps(_mm512_loadu_ps(r + 16 * i), _mm512_setzero_ps()));
        } else {
            __m512 s0 = _mm512_setzero_ps(), s1 = s0, t0 = s0, t1 = s0;
            for (int i = 0; i < 8; i += 2) {
                const __m512 c0 = _mm512_loadu_ps(r + 16 * i), c1 = _mm512_loadu_ps(r + 16 * i + 16);
                s0 = _mm512_fmadd_ps(c0, xr[i], s0);
                s1 = _mm512_fmadd_ps(c1, xr[i + 1], s1);
                t0 = _mm512_fmadd_ps(c0, yr[i], t0);
                t1 = _mm512_fmadd_ps(c1, yr[i + 1], t1);
            }
            /* one output per row, as the kernels produce */
            acc = _mm512_add_ps(acc, _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) +
                                                    _mm512_reduce_add_ps(_mm512_add_ps(t0, t1))));
        }
    }
    a->sink = _mm512_reduce_add_ps(acc);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run(float *p, size_t n, int kind, size_t ahead, const char *name)
{
    enum { T = 2, REPS = 8 };
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        pthread_t th[T];
        job j[T];
        const double t0 = now();
        for (int i = 0; i < T; i++) {
            j[i] = (job){p + n / T * i, n / T, kind, ahead, 0.0f};
            pthread_create(&th[i], NULL, pass, &j[i]);
        }
        for (int i = 0; i < T; i++)
            pthread_join(th[i], NULL);
        t[r] = now() - t0;
    }
    qsort(t + 1, REPS - 1, sizeof *t, cmp);
    printf("%-15s median %6.1f ms (fastest %6.1f)\n", name, t[REPS / 2] * 1e3, t[1] * 1e3);
}

int main(int argc, char **argv)
{
    const size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 1920;
    const size_t bytes = mib << 20, n = bytes / sizeof(float);
    float *p = aligned_alloc(2u << 20, bytes);
    if (!p || n % 256)
        return 1;
    madvise(p, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < 128; i++) {
        xs[i] = 0.01f * (float)i;
        ys[i] = 0.02f * (float)i;
    }
    printf("%zu MiB, 2 threads\n", mib);
    run(p, n, READ, 0, "read");
    run(p, n, DOT, 0, "dot");
    static const size_t aheads[] = {512, 1024, 2048, 4096, 16384};
    for (size_t i = 0; i < sizeof aheads / sizeof *aheads; i++) {
        char name[32];
        snprintf(name, sizeof name, "dot+%zu", aheads[i]);
        run(p, n, DOT, aheads[i], name);
    }
    run(p, n, INPLACE, 0, "in-place");
    run(p, n, INPLACE, 1024, "in-place+1024");
    free(p);
    return 0;
}
