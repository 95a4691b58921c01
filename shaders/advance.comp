// The cursor advance after a step (rssm_layer_record_advance), for engines
// that keep their per-slot write positions on the device: one invocation
// per row, the flush rule of common/rssm_layout.h and the decode shaders'
// clamp of write_pos, so the cursors move exactly as the decode decided
// (cuda/cursor_kernel.cu does the same on CUDA).
#version 450
#extension GL_GOOGLE_include_directive : require

#include "rssm_layout.h"
#include "vk_abi.h"

layout(local_size_x = 64) in;

// Offsets in 32-bit words from each binding's start; base_force
// RSSM_VK_NONE: no row is forced.
layout(push_constant) uniform Push {
    uint rows;
    uint slots;     // with flags, which rows are padding (RSSM_ROW_PADS)
    uint flags;     // rssm_kernel_params.flags
    uint ring_cap;  // L - 1
    uint base_slot;
    uint base_wpos;
    uint base_force;
    uint base_cursor;
} pc;

layout(std430, binding = 0) readonly buffer Slot { int w[]; } slot_index;
layout(std430, binding = 1) readonly buffer Pos { int w[]; } write_pos;
layout(std430, binding = 2) readonly buffer Force { int w[]; } force;
layout(std430, binding = 3) writeonly buffer Cursor { int w[]; } cursor;

void main()
{
    const uint r = gl_GlobalInvocationID.x;
    if (r >= pc.rows)
        return;
    const uint slot = uint(slot_index.w[pc.base_slot + r]);
    if (RSSM_ROW_PADS(slot, pc.slots, pc.flags))
        return;
    const uint n = min(uint(max(write_pos.w[pc.base_wpos + r], 0)), pc.ring_cap);
    const uint f = pc.base_force != RSSM_VK_NONE ? uint(force.w[pc.base_force + r]) : 0u;
    cursor.w[pc.base_cursor + slot] = RSSM_ROW_FLUSHES(n, pc.ring_cap, f) ? 0 : int(n) + 1;
}
