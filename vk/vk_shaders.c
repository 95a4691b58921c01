/* The SPIR-V modules built from shaders/decode.comp, shaders/inplace.comp
 * and shaders/advance.comp by vk/CMakeLists.txt (glslc / glslangValidator
 * word lists, validated with spirv-val). */
#include "vk_internal.h"

static const uint32_t decode_packed_words[] = {
#include "decode_packed.inc"
};
static const uint32_t decode_replay_words[] = {
#include "decode_replay.inc"
};
static const uint32_t decode_replay_cm_emu_words[] = {
#include "decode_replay_cm_emu.inc"
};

const vk_spirv vk_spirv_decode_packed = {"decode_packed", decode_packed_words, sizeof decode_packed_words};
const vk_spirv vk_spirv_decode_replay = {"decode_replay", decode_replay_words, sizeof decode_replay_words};
const vk_spirv vk_spirv_decode_replay_cm_emu = {"decode_replay_cm_emu", decode_replay_cm_emu_words,
                                                sizeof decode_replay_cm_emu_words};

static const uint32_t decode_packed_s16_words[] = {
#include "decode_packed_s16.inc"
};
static const uint32_t decode_replay_s16_words[] = {
#include "decode_replay_s16.inc"
};

const vk_spirv vk_spirv_decode_packed_s16 = {"decode_packed_s16", decode_packed_s16_words,
                                             sizeof decode_packed_s16_words};
const vk_spirv vk_spirv_decode_replay_s16 = {"decode_replay_s16", decode_replay_s16_words,
                                             sizeof decode_replay_s16_words};

static const uint32_t decode_packed_rt_words[] = {
#include "decode_packed_rt.inc"
};
static const uint32_t decode_replay_rt_words[] = {
#include "decode_replay_rt.inc"
};
static const uint32_t decode_replay_cm_emu_rt_words[] = {
#include "decode_replay_cm_emu_rt.inc"
};

const vk_spirv vk_spirv_decode_packed_rt = {"decode_packed_rt", decode_packed_rt_words, sizeof decode_packed_rt_words};
const vk_spirv vk_spirv_decode_replay_rt = {"decode_replay_rt", decode_replay_rt_words, sizeof decode_replay_rt_words};
const vk_spirv vk_spirv_decode_replay_cm_emu_rt = {"decode_replay_cm_emu_rt", decode_replay_cm_emu_rt_words,
                                                   sizeof decode_replay_cm_emu_rt_words};

static const uint32_t window_words[] = {
#include "window.inc"
};
const vk_spirv vk_spirv_window = {"window", window_words, sizeof window_words};
static const uint32_t window_rt_words[] = {
#include "window_rt.inc"
};
const vk_spirv vk_spirv_window_rt = {"window_rt", window_rt_words, sizeof window_rt_words};

static const uint32_t inplace_words[] = {
#include "inplace.inc"
};
const vk_spirv vk_spirv_inplace = {"inplace", inplace_words, sizeof inplace_words};

static const uint32_t advance_words[] = {
#include "advance.inc"
};
const vk_spirv vk_spirv_advance = {"advance", advance_words, sizeof advance_words};

#ifdef RSSM_VK_HAVE_CM_SPIRV
static const uint32_t decode_replay_cm_words[] = {
#include "decode_replay_cm.inc"
};
const vk_spirv vk_spirv_decode_replay_cm = {"decode_replay_cm", decode_replay_cm_words,
                                            sizeof decode_replay_cm_words};
#else
const vk_spirv vk_spirv_decode_replay_cm = {"decode_replay_cm", NULL, 0};
#endif
