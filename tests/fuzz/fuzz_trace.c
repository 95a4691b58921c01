/* libFuzzer: the trace loader (tools/harness/trace_io.c). A valid small
 * trace is written to a directory once; each input replaces one of its
 * files (picked by the first byte) with the rest of the input, and the
 * directory is loaded. Every input must get a status, never a crash. */
#define _POSIX_C_SOURCE 200809L

#include "fuzz_model.h"
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];
static const char *const files[] = {"model.json", "q.npy", "k.npy", "v.npy", "gate.npy", "beta.npy",
                                    "slots.npy", "seq_len_after.npy", "initial_state.npy", "expected_out.npy"};
enum { NFILES = sizeof files / sizeof files[0] };
static unsigned char *originals[NFILES];
static size_t original_sizes[NFILES];

static unsigned char *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *size = b && n > 0 && fread(b, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
    fclose(f);
    return b;
}

static void write_file(size_t i, const unsigned char *b, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    FILE *f = fopen(path, "wb");
    if (f) {
        if (n)
            fwrite(b, 1, n, f);
        fclose(f);
    }
}

static void remove_dir(void)
{
    char path[128];
    for (size_t i = 0; i < NFILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(dir, sizeof dir, "/tmp/rssm-fuzz-trace-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    atexit(remove_dir);
    rssm_model m = fuzz_model();
    rh_trace_spec spec = {.model = m, .steps = 3, .batch = 2, .seed = 1};
    rh_trace t;
    rssm_error err;
    if (rh_trace_generate(&spec, &t, &err) != RSSM_OK)
        abort();
    float out[3 * 2 * 2 * 8] = {0};
    if (rh_trace_save(&t, dir, out, &err) != RSSM_OK)
        abort();
    rh_trace_free(&t);
    for (size_t i = 0; i < NFILES; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        originals[i] = read_all(path, &original_sizes[i]);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const size_t which = data[0] % NFILES;
    write_file(which, data + 1, size - 1);
    rh_trace t;
    rssm_error err;
    if (rh_trace_load(dir, &t, &err) == RSSM_OK)
        rh_trace_free(&t);
    write_file(which, originals[which], original_sizes[which]);
    return 0;
}
