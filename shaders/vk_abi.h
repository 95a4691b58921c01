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

#endif
