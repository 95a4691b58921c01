/* What the Vulkan host (vk/) and the shaders agree on that is Vulkan's own;
 * included by both (a #define is valid C and GLSL). The layouts every
 * backend shares are in common/rssm_layout.h. */
#ifndef RSSM_VK_ABI_H
#define RSSM_VK_ABI_H

/* A pool is at most this many storage buffers, each holding whole slots and
 * no more than the device binds in one descriptor (maxStorageBufferRange,
 * 128 MiB on lavapipe, 4 GiB on NVIDIA): binding 0 of the decode shaders is
 * an array of this many, and a workgroup indexes it with its slot's buffer. */
#define RSSM_VK_POOL_BUFFERS 16

/* Subgroups per decode workgroup. */
#define RSSM_VK_SUBGROUPS 4

/* State rows a subgroup of the decode shaders reads at once: a workgroup
 * takes RSSM_VK_SUBGROUPS * RSSM_VK_ROW_BLOCK rows per pass, and a value
 * head split over several workgroups is split in multiples of that. */
#define RSSM_VK_ROW_BLOCK 4

/* The decode shaders' specialization-constant ids (what each means is in
 * shaders/decode.comp); vk/vk_pipeline.c sets every one. */
#define RSSM_VK_SPEC_GATE_KIND 0
#define RSSM_VK_SPEC_HEAD_K 1
#define RSSM_VK_SPEC_HEAD_V 2
#define RSSM_VK_SPEC_RING_LEN 3
#define RSSM_VK_SPEC_SG_SIZE 4
#define RSSM_VK_SPEC_STATE_DT 5
#define RSSM_VK_SPEC_RING_DT 6
#define RSSM_VK_SPEC_IO_DT 7
#define RSSM_VK_SPEC_TILE_M 8
#define RSSM_VK_SPEC_TILE_N 9
#define RSSM_VK_SPEC_TILE_K 10
#define RSSM_VK_SPEC_WG_SIZE 11
#define RSSM_VK_SPEC_FLUSH_ROWS 12
#define RSSM_VK_SPEC_SLOTS_PER_BUFFER 13
#define RSSM_VK_SPEC_ROW_SPLIT 14
#define RSSM_VK_SPEC_PREFETCH 15
#define RSSM_VK_SPEC_UNROLL_RING 16
#define RSSM_VK_SPEC_COUNT 17

#endif
