/* libFuzzer: the .npy parser (tools/harness/npy.c) on arbitrary bytes. It
 * must answer every input with a status, never crash, leak or overflow. */
#include "npy.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rh_npy a;
    rssm_error err;
    if (rh_npy_parse(data, size, "fuzz.npy", &a, &err) == RSSM_OK)
        rh_npy_free(&a);
    return 0;
}
