// The benchmarks' bandwidth passes (docs/design.md §7), one shader for both:
//   in place  src and dst bind the same pool: one pass that reads every
//             16-byte word of its first `count` uvec4 and writes it back, the
//             least memory traffic a step that updates the whole pool in
//             place can have;
//   copy      src and dst are two buffers: the copy ceiling, measured with
//             the same kind of kernel as the decode (vkCmdCopyBuffer reached
//             a fifth of a GPU's bandwidth).
//
// The host pushes flip = 0, so an in-place pass changes no byte (the tests
// push another value to see every word touched); the compiler cannot know
// that, so every load and store stays. A grid-stride loop lets the host cap
// the dispatch at the device's limit (vk/vk_bench.c).
#version 450

layout(local_size_x_id = 0) in;  // the host's workgroup size

layout(push_constant) uniform Params {
    uint count;  // uvec4 words to pass over
    uint flip;   // xored into every word: 0 but in the tests
} params;

layout(std430, binding = 0) readonly buffer Src { uvec4 w[]; } src;
layout(std430, binding = 1) writeonly buffer Dst { uvec4 w[]; } dst;

void main()
{
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    const uvec4 flip = uvec4(params.flip);
    for (uint i = gl_GlobalInvocationID.x; i < params.count; i += stride)
        dst.w[i] = src.w[i] ^ flip;
}
