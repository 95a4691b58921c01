/* Export / import of one slot as self-describing bytes: prefill/decode
 * disaggregation, and moving a sequence between backends. The payload is
 * the canonical slot block of rssm_layout.h, so any backend reads what any
 * other wrote. */
#include "objects.h"
#include "checksum.h"
#include "error.h"

#include <string.h>

#define EXPORT_MAGIC "RSSMSLOT"
/* 2: XXH3-64 checksum (1 was FNV-1a, byte at a time). */
#define EXPORT_VERSION 2u

/* Every field little-endian as the host writes it; rssm targets
 * little-endian machines only (x86-64, AArch64, GPUs). */
typedef struct export_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint32_t layers, num_qk_heads, num_v_heads, head_k, head_v;
    uint32_t gate_kind, replay, ring_len, state_dtype, ring_dtype;
    uint32_t write_pos;
    uint32_t reserved;
    uint64_t payload_bytes;
    uint64_t checksum; /* XXH3-64 of the payload, seeded with XXH3-64 of this header (checksum zeroed) */
} export_header;

_Static_assert(sizeof(export_header) == 80, "export header is packed by construction");

/* Covers the header too, so a flipped write_pos or shape field is caught
 * even where it still looks plausible. XXH3-64 of our own (checksum.h),
 * xxHash's bit for bit, so the library needs no xxhash.h and exports of
 * earlier builds still import; scalar, about 6 GB/s on one core, so checking
 * a slot costs far less than moving it between machines. */
static uint64_t checksum(export_header h, const uint8_t *payload, size_t n)
{
    h.checksum = 0;
    return rssm_xxh3_64(payload, n, rssm_xxh3_64(&h, sizeof h, 0));
}

static void describe(const rssm_pool *p, uint32_t write_pos, export_header *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, EXPORT_MAGIC, sizeof h->magic);
    h->version = EXPORT_VERSION;
    h->header_bytes = sizeof *h;
    h->layers = p->model.layers;
    h->num_qk_heads = p->model.num_qk_heads;
    h->num_v_heads = p->model.num_v_heads;
    h->head_k = p->model.head_k;
    h->head_v = p->model.head_v;
    h->gate_kind = (uint32_t)p->model.gate_kind;
    h->replay = (uint32_t)p->model.replay;
    h->ring_len = rssm_effective_ring_len(&p->model);
    h->state_dtype = (uint32_t)p->model.state_dtype;
    h->ring_dtype = (uint32_t)p->model.ring_dtype;
    h->write_pos = write_pos;
    h->payload_bytes = p->layout.slot_bytes;
}

size_t rssm_pool_export_size(const rssm_pool *p)
{
    return p ? sizeof(export_header) + p->layout.slot_bytes : 0;
}

static rssm_status pool_export_unlocked(rssm_pool *p, uint32_t slot, void *bytes, size_t size, rssm_error *err)
{
    if (!bytes)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "export: bytes must not be NULL");
    rssm_status st = rssm_pool_check_slot(p, slot, err);
    const rssm_named_address host[] = {{"bytes", bytes}};
    if (st != RSSM_OK || (st = rssm_backend_check_host_memory(p->backend, "export", host, 1, err)) != RSSM_OK)
        return st;
    if (size < rssm_pool_export_size(p))
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "export: buffer of %zu bytes, %zu needed", size,
                              rssm_pool_export_size(p));
    st = rssm_pool_slot_read(p, slot, p->scratch, err);
    if (st != RSSM_OK)
        return st;
    rssm_slot_clear_uncommitted(&p->model, &p->layout, p->scratch, p->write_pos[slot]);
    export_header h;
    describe(p, p->write_pos[slot], &h);
    h.checksum = checksum(h, p->scratch, p->layout.slot_bytes);
    memcpy(bytes, &h, sizeof h);
    memcpy((uint8_t *)bytes + sizeof h, p->scratch, p->layout.slot_bytes);
    return rssm_clear_error(err);
}

#define MISMATCH(field, what)                                                                         \
    if (h.field != want.field)                                                                        \
        return rssm_set_error(err, RSSM_ERR_FORMAT, "import: slot bytes are for %s %u, this pool has %u", \
                              what, h.field, want.field);

static rssm_status pool_import_unlocked(rssm_pool *p, uint32_t slot, const void *bytes, size_t size, rssm_error *err)
{
    if (!bytes)
        return rssm_set_error(err, RSSM_ERR_INVALID_ARGUMENT, "import: bytes must not be NULL");
    rssm_status st = rssm_pool_check_slot(p, slot, err);
    const rssm_named_address host[] = {{"bytes", bytes}};
    if (st != RSSM_OK || (st = rssm_backend_check_host_memory(p->backend, "import", host, 1, err)) != RSSM_OK)
        return st;
    export_header h, want;
    if (size < sizeof h)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "import: %zu bytes is shorter than the %zu-byte header", size,
                              sizeof h);
    memcpy(&h, bytes, sizeof h);
    if (memcmp(h.magic, EXPORT_MAGIC, sizeof h.magic) != 0)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "import: not rssm slot bytes (bad magic)");
    if (h.version != EXPORT_VERSION || h.header_bytes != sizeof h)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "import: unsupported slot format version %u", h.version);
    describe(p, 0, &want);
    MISMATCH(layers, "layers")
    MISMATCH(num_qk_heads, "H")
    MISMATCH(num_v_heads, "HV")
    MISMATCH(head_k, "K")
    MISMATCH(head_v, "V")
    MISMATCH(gate_kind, "gate kind")
    MISMATCH(replay, "replay")
    MISMATCH(ring_len, "ring length")
    MISMATCH(state_dtype, "state dtype")
    MISMATCH(ring_dtype, "ring dtype")
    if (h.write_pos >= want.ring_len)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "import: write_pos %u is not below the ring length %u",
                              h.write_pos, want.ring_len);
    /* Two different faults, said apart: a header that describes another
     * payload (damaged or edited), and a buffer cut short or padded. */
    if (h.payload_bytes != want.payload_bytes)
        return rssm_set_error(err, RSSM_ERR_FORMAT,
                              "import: the header's payload_bytes is %llu, this pool's slots hold %llu "
                              "(damaged header?)",
                              (unsigned long long)h.payload_bytes, (unsigned long long)want.payload_bytes);
    if (size != sizeof h + p->layout.slot_bytes)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "import: %zu bytes given, %zu expected (%s)", size,
                              sizeof h + p->layout.slot_bytes,
                              size < sizeof h + p->layout.slot_bytes ? "truncated?" : "trailing bytes?");
    const uint8_t *payload = (const uint8_t *)bytes + sizeof h;
    if (checksum(h, payload, p->layout.slot_bytes) != h.checksum)
        return rssm_set_error(err, RSSM_ERR_FORMAT, "import: payload checksum mismatch (corrupted bytes)");
    /* The checksum catches accidents, not intent: the content must also be
     * a state the kernels can run from. */
    char why[160];
    if (!rssm_slot_validate(&p->model, &p->layout, payload, h.write_pos, why, sizeof why))
        return rssm_set_error(err, RSSM_ERR_FORMAT, "import: %s", why);
    st = rssm_pool_slot_write(p, slot, payload, err);
    if (st != RSSM_OK)
        return st;
    /* Imported slots join the staggered policy like new ones; one that is
     * already past its shortened cycle flushes on its next step. */
    p->write_pos[slot] = h.write_pos;
    p->cycle_len[slot] = rssm_pool_first_cycle_len(p, slot);
    return rssm_clear_error(err);
}

/* The public entry points: each holds the pool lock (objects.h). */

rssm_status rssm_pool_export(rssm_pool *p, uint32_t slot, void *bytes, size_t size, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_export_unlocked(p, slot, bytes, size, err));
}

rssm_status rssm_pool_import(rssm_pool *p, uint32_t slot, const void *bytes, size_t size, rssm_error *err)
{
    RSSM_POOL_LOCKED(p, pool_import_unlocked(p, slot, bytes, size, err));
}
