// A thin matrix-tile interface for the `_cm` kernels, with two
// implementations of the same semantics:
//
//   RSSM_TILES == 1  KHR cooperative matrices (GL_KHR_cooperative_matrix)
//   RSSM_TILES == 2  an emulation in plain GLSL, so the `_cm` kernels'
//                    tiling and indexing run (and are tested) on devices
//                    without cooperative matrices, lavapipe included
//
// Semantics (both): a tile is owned by one subgroup; every operation is
// called by all of its invocations in uniform control flow.
//   TILE_A_DECL(x)  TILE_M x TILE_K, fp16 elements (rounded on load)
//   TILE_B_DECL(x)  TILE_K x TILE_N, fp16 elements
//   TILE_C_DECL(x)  TILE_M x TILE_N, fp32 accumulator
//   tile_load_{a,b,c}(x, arr, off, stride)   row-major from a shared array
//   tile_store_c(x, arr, off, stride)        row-major into a shared array
//   tile_mul_add(c, a, b)                    c += a * b, fp32 accumulation
//   tile_length(x), tile_elem(x, i)          this invocation's elements;
//       which position an element holds is unspecified (element-wise work only)
// A tile load reads, and a store writes, shared memory that other invocations
// of the subgroup wrote or will read: callers put subgroupMemoryBarrierShared()
// and subgroupBarrier() around them, as they would for any shared data.
//
// The caller declares TILE_M, TILE_N, TILE_K, SG_SIZE, and for the emulation
// a per-subgroup shared scratch `s_tile` of TILE_M*TILE_K + TILE_K*TILE_N
// floats starting at `tile_scratch`.
#ifndef RSSM_TILE_GLSL
#define RSSM_TILE_GLSL

#if RSSM_TILES == 1

#define TILE_AB_T float16_t
#define TILE_A_DECL(x) coopmat<float16_t, gl_ScopeSubgroup, TILE_M, TILE_K, gl_MatrixUseA> x
#define TILE_B_DECL(x) coopmat<float16_t, gl_ScopeSubgroup, TILE_K, TILE_N, gl_MatrixUseB> x
#define TILE_C_DECL(x) coopmat<float, gl_ScopeSubgroup, TILE_M, TILE_N, gl_MatrixUseAccumulator> x
#define tile_load_a(x, arr, off, stride) \
    coopMatLoad(x, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define tile_load_b(x, arr, off, stride) \
    coopMatLoad(x, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define tile_load_c(x, arr, off, stride) \
    coopMatLoad(x, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define tile_store_c(x, arr, off, stride) \
    coopMatStore(x, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define tile_mul_add(c, a, b) c = coopMatMulAdd(a, b, c)
#define tile_length(x) uint(x.length())
#define tile_elem(x, i) x[i]

#elif RSSM_TILES == 2

// Element e of invocation l holds the tile's row-major position e*SG_SIZE + l.
#define TILE_AB_T float
const uint TILE_A_ELEMS = TILE_M * TILE_K / SG_SIZE;
const uint TILE_B_ELEMS = TILE_K * TILE_N / SG_SIZE;
const uint TILE_C_ELEMS = TILE_M * TILE_N / SG_SIZE;
#define TILE_A_DECL(x) float x[TILE_A_ELEMS]
#define TILE_B_DECL(x) float x[TILE_B_ELEMS]
#define TILE_C_DECL(x) float x[TILE_C_ELEMS]

#define RSSM_TILE_LOAD(x, n, cols, arr, off, stride, conv)                          \
    for (uint e_ = 0u; e_ < n; e_++) {                                              \
        uint p_ = e_ * SG_SIZE + gl_SubgroupInvocationID;                           \
        x[e_] = conv(arr[(off) + (p_ / (cols)) * (stride) + p_ % (cols)]);          \
    }
#define RSSM_TILE_NOCONV(v) (v)
#define tile_load_a(x, arr, off, stride) \
    RSSM_TILE_LOAD(x, TILE_A_ELEMS, TILE_K, arr, off, stride, rssm_round_f16)
#define tile_load_b(x, arr, off, stride) \
    RSSM_TILE_LOAD(x, TILE_B_ELEMS, TILE_N, arr, off, stride, rssm_round_f16)
#define tile_load_c(x, arr, off, stride) \
    RSSM_TILE_LOAD(x, TILE_C_ELEMS, TILE_N, arr, off, stride, RSSM_TILE_NOCONV)
#define tile_store_c(x, arr, off, stride)                                           \
    for (uint e_ = 0u; e_ < TILE_C_ELEMS; e_++) {                                   \
        uint p_ = e_ * SG_SIZE + gl_SubgroupInvocationID;                           \
        arr[(off) + (p_ / TILE_N) * (stride) + p_ % TILE_N] = x[e_];                \
    }
// The product needs every element of a row of A and a column of B: the
// operands go through the subgroup's scratch, as the hardware would move them
// through its register file.
#define tile_mul_add(c, a, b)                                                       \
    {                                                                               \
        subgroupBarrier();                                                          \
        for (uint e_ = 0u; e_ < TILE_A_ELEMS; e_++)                                 \
            s_tile[tile_scratch + e_ * SG_SIZE + gl_SubgroupInvocationID] = a[e_];  \
        for (uint e_ = 0u; e_ < TILE_B_ELEMS; e_++)                                 \
            s_tile[tile_scratch + TILE_M * TILE_K + e_ * SG_SIZE +                  \
                   gl_SubgroupInvocationID] = b[e_];                                \
        subgroupMemoryBarrierShared();                                              \
        subgroupBarrier();                                                          \
        for (uint e_ = 0u; e_ < TILE_C_ELEMS; e_++) {                               \
            uint p_ = e_ * SG_SIZE + gl_SubgroupInvocationID;                       \
            uint r_ = p_ / TILE_N, col_ = p_ % TILE_N;                              \
            float acc_ = c[e_];                                                     \
            for (uint k_ = 0u; k_ < TILE_K; k_++)                                   \
                acc_ += s_tile[tile_scratch + r_ * TILE_K + k_] *                   \
                        s_tile[tile_scratch + TILE_M * TILE_K + k_ * TILE_N + col_]; \
            c[e_] = acc_;                                                           \
        }                                                                           \
        subgroupBarrier();                                                          \
    }
#define tile_length(x) uint(x.length())
#define tile_elem(x, i) x[i]

#else
#error "tile.glsl needs RSSM_TILES 1 (KHR cooperative matrix) or 2 (emulated)"
#endif

#endif
